import { html, useEffect, useRef } from './html.js';

/** The frames already given their html: each gets it once, whichever of its two signals comes first. */
const given = new WeakSet();

/**
 * Email html in a sandboxed frame. The frame (dashboard/frame.html) has an opaque origin and a policy of its
 * own (see src/modules/dashboard/dashboard.routes.ts); it announces itself, then gets the html by
 * postMessage — never through a URL, so nothing of the email lands in a log either. The frame's
 * announcement can come before this component's effect listens for it (a frame loaded from cache, on a busy
 * machine), so its load event — after its loader has run — gives the html too.
 */
export function HtmlPreview({ html: content, title = 'Email preview' }) {
  const frame = useRef(null);
  const give = (element) => {
    if (!element?.contentWindow || given.has(element)) return;
    given.add(element);
    // The frame's origin is opaque ("null"), so '*' is the only target origin that reaches it.
    element.contentWindow.postMessage({ html: content ?? '' }, '*');
  };
  useEffect(() => {
    const onMessage = (event) => {
      if (event.source !== frame.current?.contentWindow || !event.data?.previewReady) return;
      give(frame.current);
    };
    window.addEventListener('message', onMessage);
    return () => window.removeEventListener('message', onMessage);
  }, [content]);
  // A new frame per content: the loader writes once and then the document is the email's.
  return html`<iframe
    key=${content}
    ref=${frame}
    class="preview"
    title=${title}
    sandbox="allow-scripts"
    referrerpolicy="no-referrer"
    src="/dashboard/frame.html"
    onLoad=${(event) => give(event.currentTarget)}
  ></iframe>`;
}

/**
 * The policy written into an inert frame's document: no script, nothing from the network (a remote image is
 * a tracker: it tells the sender the mail was read, and when, and from where), inline images (`data:`) only.
 * A `srcdoc` document also inherits the dashboard's own policy, which only ever narrows this one: its
 * `style-src 'self'` means the email's inline styles do not apply either (the text and layout show, unstyled).
 * HtmlPreview keeps them, at the price of a frame that may run our loader script; for mail from strangers
 * nothing runs at all.
 */
const INERT_POLICY = [
  "default-src 'none'",
  'img-src data:',
  "style-src 'unsafe-inline'",
  'font-src data:',
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

/**
 * Html from someone else (a received email) in a frame that can do nothing: `sandbox` with no permission at
 * all (no scripts, an opaque origin, no forms, no popups, no navigating the dashboard) and the document's own
 * policy above, given as `srcdoc` — no script of ours runs in it either, and nothing of it goes in a URL.
 */
export function InertHtml({ html: content, title = 'Email html' }) {
  const source = `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="${INERT_POLICY}"><meta name="referrer" content="no-referrer"></head><body>${content ?? ''}</body></html>`;
  return html`<iframe
    class="preview"
    title=${title}
    sandbox=""
    referrerpolicy="no-referrer"
    srcdoc=${source}
  ></iframe>`;
}
