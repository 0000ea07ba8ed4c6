import { html, useState } from '../html.js';
import { api } from '../api.js';
import { HtmlPreview } from '../preview.js';
import { ErrorBanner, Field, fieldErrors, FormError, Link, Notice, useAsync } from '../ui.js';

// A broadcast's compose page: its copy as a chosen contact would get it (POST /v1/broadcasts/{id}/preview)
// and a test of it sent to one address (POST /v1/broadcasts/{id}/test). A preview is a read (a read_only key
// may look); a test is a send, so its button is a write.

const PLACEHOLDERS_NOTE =
  "Exactly what this contact's copy will say. Its own unsubscribe and preference links are made when it is sent: here they show as {{ unsubscribe_url }} and {{ preferences_url }}.";

/** Preview as a contact of the segment, and send a test to one address. */
export function PreviewAndTest({ broadcast }) {
  // A few of the segment's contacts to choose from (any other can be typed: an address or an id).
  const members = useAsync(
    () =>
      broadcast.segment_id
        ? api('GET', `/contacts?segment_id=${encodeURIComponent(broadcast.segment_id)}&limit=20`)
        : { data: [] },
    [broadcast.segment_id],
  );
  const [contact, setContact] = useState('');
  const [preview, setPreview] = useState(null);
  const [previewError, setPreviewError] = useState(null);
  const [to, setTo] = useState('');
  const [testError, setTestError] = useState(null);
  const [sent, setSent] = useState(null);
  const [busy, setBusy] = useState(false);
  const show = async (event) => {
    event.preventDefault();
    setPreviewError(null);
    try {
      setPreview(await api('POST', `/broadcasts/${broadcast.id}/preview`, { contact: contact.trim() }));
    } catch (failure) {
      setPreview(null);
      setPreviewError(failure);
    }
  };
  const test = async (event) => {
    event.preventDefault();
    setTestError(null);
    setSent(null);
    setBusy(true);
    const body = { to: to.trim(), ...(contact.trim() ? { contact: contact.trim() } : {}) };
    try {
      setSent(await api('POST', `/broadcasts/${broadcast.id}/test`, body));
    } catch (failure) {
      setTestError(failure);
    } finally {
      setBusy(false);
    }
  };
  const previewErrors = fieldErrors(previewError);
  const testErrors = fieldErrors(testError);
  return html`<section class="card" aria-labelledby="preview-title" data-testid="broadcast-preview">
    <h2 id="preview-title">Preview as a contact</h2>
    <form class="inline-form" onSubmit=${show} novalidate>
      <${FormError} error=${previewError} fields=${['contact']} />
      <${Field}
        label="Contact (address or id)"
        name="contact"
        errors=${previewErrors}
        hint="One of the segment's contacts, or any contact of the project."
      >
        ${(field) =>
          html`<input
            ...${field}
            list="preview-contacts"
            autocomplete="off"
            value=${contact}
            onInput=${(event) => setContact(event.currentTarget.value)}
          />`}
      </${Field}>
      <datalist id="preview-contacts">
        ${(members.data?.data ?? []).map((each) => html`<option value=${each.email}></option>`)}
      </datalist>
      <button type="submit" disabled=${!contact.trim()}>Preview</button>
    </form>
    <${ErrorBanner} error=${members.error} />
    ${
      preview
        ? html`<dl class="facts" data-testid="preview-fields">
              <dt>From</dt>
              <dd>${preview.from ?? '—'}</dd>
              <dt>To</dt>
              <dd>${preview.to}</dd>
              <dt>Subject</dt>
              <dd class="break">${preview.subject}</dd>
            </dl>
            <p class="small muted">${PLACEHOLDERS_NOTE}</p>
            ${preview.html !== null ? html`<${HtmlPreview} html=${preview.html} title=${`The copy for ${preview.to}`} />` : null}
            ${
              preview.text !== null
                ? html`<details>
                    <summary>Text</summary>
                    <pre class="code">${preview.text}</pre>
                  </details>`
                : null
            }`
        : null
    }
    <h3>Send a test</h3>
    <form class="inline-form" onSubmit=${test} novalidate>
      <${FormError} error=${testError} fields=${['to', 'contact']} />
      <${Field}
        label="Test address"
        name="to"
        errors=${testErrors}
        hint="One address. Marked [Test], personalized as the contact above (or the contact with this address), never counted in the broadcast."
      >
        ${(field) =>
          html`<input
            ...${field}
            type="email"
            autocomplete="email"
            value=${to}
            onInput=${(event) => setTo(event.currentTarget.value)}
          />`}
      </${Field}>
      <button data-writes type="submit" disabled=${busy || !to.trim()}>${busy ? 'Sending…' : 'Send test'}</button>
    </form>
    ${
      sent
        ? html`<${Notice} kind="ok">
            Test sent to ${sent.to}: <${Link} href=${`/dashboard/emails/${sent.email_id}`}>${sent.email_id}</${Link}>.
          </${Notice}>`
        : null
    }
  </section>`;
}
