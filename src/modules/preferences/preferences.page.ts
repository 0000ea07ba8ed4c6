import { escapeHtml as escape } from '../../lib/escape-html.ts';
import type { Preferences, PreferenceChange } from './preferences.service.ts';

// The preference page's html: one self-contained document (no script, no file from anywhere: its policy
// allows inline styles only), in the dashboard's colours, type and focus outline (dashboard/assets/app.css).
// Everything that comes from data (addresses, topic names and descriptions) is escaped here.

const STYLE = `:root{--ink:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#f8fafc;--brand:#4f46e5;--brand-ink:#3730a3;--ok:#15803d;--ok-bg:#dcfce7;--bad:#b91c1c;--bad-bg:#fee2e2;color-scheme:light}
*{box-sizing:border-box}body{margin:0;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--ink);background:var(--bg)}
header{background:#fff;border-bottom:3px solid var(--brand);padding:.75rem 1.25rem;font-weight:600}
main{max-width:40rem;margin:0 auto;padding:1.25rem}h1{font-size:1.6rem;margin:.2rem 0 .6rem}h2{font-size:1.15rem;margin:0 0 .6rem}
.lead,.muted{color:var(--muted)}.card{background:#fff;border:1px solid var(--line);border-radius:8px;padding:1rem;margin-bottom:1rem}
fieldset{border:0;margin:0 0 1rem;padding:0}legend{font-weight:600;margin-bottom:.5rem}
.topic{display:flex;gap:.6rem;align-items:flex-start;padding:.5rem 0;border-top:1px solid var(--line)}.topic:first-of-type{border-top:0}
.topic input{width:1.15rem;height:1.15rem;margin-top:.2rem;flex:none}.topic label{font-weight:600}.topic p{margin:0;color:var(--muted)}
button{font:inherit;padding:.45rem .9rem;border:1px solid #cbd5e1;background:#fff;border-radius:6px;cursor:pointer}
.primary{background:var(--brand);border-color:var(--brand);color:#fff}.danger{color:var(--bad);border-color:#fca5a5}
:focus-visible{outline:3px solid var(--brand-ink);outline-offset:2px}
.banner{border-radius:8px;padding:.75rem 1rem;margin-bottom:1rem;border:1px solid}.ok{background:var(--ok-bg);border-color:#86efac;color:#14532d}.bad{background:var(--bad-bg);border-color:#fca5a5;color:#7f1d1d}
.break{overflow-wrap:anywhere}`;

/** A whole page: the header, then `body` in the main column. */
export function preferenceDocument(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><meta name="robots" content="noindex"><title>${escape(title)}</title><style>${STYLE}</style></head><body><header>Email preferences</header><main>${body}</main></body></html>`;
}

/** The page for a link that leads nowhere (404), ran out (410) or a request it cannot take (400, 403). */
export const problemPage = (heading: string, text: string): string =>
  preferenceDocument(heading, `<h1>${escape(heading)}</h1><p>${escape(text)}</p>`);

const outcome = (change: PreferenceChange | undefined): string => {
  if (!change) return '';
  if (change.done === 'refused') return `<div class="banner bad" role="alert">${escape(change.reason)}</div>`;
  let text: string;
  if (change.done === 'unsubscribed') text = 'You are unsubscribed from all of these emails.';
  else if (change.done === 'resubscribed')
    text = 'You are subscribed again: you get the topics ticked below.';
  else
    text =
      change.changed === 0 ? 'Nothing changed: your choices were already saved.' : 'Your choices are saved.';
  return `<div class="banner ok" role="status">${escape(text)}</div>`;
};

/** The contact's page: the topics with a box each, save, and unsubscribe from (or back to) everything. */
export function preferencesPage(token: string, preferences: Preferences, change?: PreferenceChange): string {
  const hidden = `<input type="hidden" name="token" value="${escape(token)}">`;
  const topics = preferences.topics
    .map(({ topic, subscription }) => {
      const id = `topic-${escape(topic.id)}`;
      const description = topic.description
        ? `<p id="${id}-description">${escape(topic.description)}</p>`
        : '';
      return `<div class="topic"><input type="checkbox" name="topic" value="${escape(topic.id)}" id="${id}"${subscription === 'opt_in' ? ' checked' : ''}${description ? ` aria-describedby="${id}-description"` : ''}><div><label for="${id}">${escape(topic.name)}</label>${description}</div></div>`;
    })
    .join('');
  const topicForm =
    preferences.topics.length === 0
      ? ''
      : `<form method="post" class="card">${hidden}<input type="hidden" name="action" value="save"><input type="hidden" name="shown" value="${escape(preferences.topics.map(({ topic }) => topic.id).join(','))}"><fieldset><legend><h2>Topics</h2></legend><p class="muted">Tick what you want to get; untick what you do not.</p>${topics}</fieldset><button type="submit" class="primary">Save choices</button></form>`;
  const everything = preferences.unsubscribed
    ? `<form method="post" class="card">${hidden}<input type="hidden" name="action" value="resubscribe"><h2>All emails</h2><p>You are unsubscribed from all of these emails.</p><button type="submit">Subscribe again</button></form>`
    : `<form method="post" class="card">${hidden}<input type="hidden" name="action" value="unsubscribe_all"><h2>All emails</h2><p>Stop every one of these emails, whatever the topic.</p><button type="submit" class="danger">Unsubscribe from all</button></form>`;
  return preferenceDocument(
    'Email preferences',
    `<h1>Your email preferences</h1><p class="lead break">For <strong>${escape(preferences.email)}</strong>. Each change applies at once.</p>${outcome(change)}${topicForm}${everything}`,
  );
}
