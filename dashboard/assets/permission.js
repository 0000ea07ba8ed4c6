import { html, useEffect, useState } from './html.js';
import { api } from './api.js';

// What the signed-in key may do (GET /v1/api-keys/current). A read_only key can look at everything and
// change nothing: the server refuses every change (403), and the dashboard says so before anyone tries, by
// disabling each control the pages mark `data-writes` (one that makes a change through the API). The pages
// need not know about the key: the marked controls are found here as they render.

const READ_ONLY_TITLE = 'This key is read_only: a full_access key can do this.';

function disableWrites(root) {
  const visit = () => {
    for (const control of root.querySelectorAll('[data-writes]')) {
      if (control.disabled) continue;
      control.disabled = true;
      control.title = READ_ONLY_TITLE;
    }
  };
  visit();
  // Pages render later and re-render (a busy flag may enable a button again): look again at each change.
  const observer = new MutationObserver(visit);
  observer.observe(root, { subtree: true, childList: true, attributes: true, attributeFilter: ['disabled'] });
  return () => observer.disconnect();
}

/** The message for a key the dashboard cannot use (a sending_access key), or null. */
export function unusableKeyMessage(error) {
  if (error?.status !== 403) return null;
  return 'This key is sending_access: it can send email but not read it. The dashboard needs a full_access or read_only key.';
}

/**
 * The key's permission once known (undefined before). In a read_only session, every write control under
 * `#main` is disabled for as long as the session lasts. `onUnusable(message)`: the key cannot use the
 * dashboard at all.
 */
export function useKeyPermission(onUnusable) {
  const [permission, setPermission] = useState(undefined);
  useEffect(() => {
    let stop;
    let live = true;
    api('GET', '/api-keys/current').then(
      (key) => {
        if (!live) return;
        setPermission(key.permission);
        document.documentElement.dataset.permission = key.permission;
        if (key.permission === 'read_only') stop = disableWrites(document.getElementById('main'));
      },
      (error) => {
        const message = unusableKeyMessage(error);
        if (live && message) onUnusable(message);
      },
    );
    return () => {
      live = false;
      stop?.();
      delete document.documentElement.dataset.permission;
    };
  }, []);
  return permission;
}

export const ReadOnlyBanner = () =>
  html`<p class="banner banner-info" role="status" data-read-only-banner>
    Read-only key: you can see everything in this project and change nothing. Sign in with a full_access key
    to make changes.
  </p>`;
