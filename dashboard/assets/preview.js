import { html, useEffect, useRef } from './html.js';

/**
 * Email html in a sandboxed frame. The frame (dashboard/frame.html) has an opaque origin and a policy of its
 * own (see src/modules/dashboard/dashboard.routes.ts); it announces itself, then gets the html by
 * postMessage — never through a URL, so nothing of the email lands in a log either.
 */
export function HtmlPreview({ html: content, title = 'Email preview' }) {
  const frame = useRef(null);
  useEffect(() => {
    const onMessage = (event) => {
      if (event.source !== frame.current?.contentWindow || !event.data?.previewReady) return;
      // The frame's origin is opaque ("null"), so '*' is the only target origin that reaches it.
      frame.current.contentWindow.postMessage({ html: content ?? '' }, '*');
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
  ></iframe>`;
}
