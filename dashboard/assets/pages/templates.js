import { html, useEffect, useRef, useState } from '../html.js';
import { api } from '../api.js';
import { diffLines } from '../diff.js';
import { ListPage } from '../list.js';
import { HtmlPreview } from '../preview.js';
import {
  Chip,
  confirmAction,
  Empty,
  ErrorBanner,
  Field,
  fieldErrors,
  FormError,
  formatTime,
  Link,
  Loading,
  navigate,
  Notice,
  Table,
  useAsync,
} from '../ui.js';

export function TemplatesPage({ search }) {
  return html`<h1>Templates</h1>
    <p class="lead">
      Liquid templates (<code>{{ name }}</code>). Sends use the latest published version; edit the draft
      freely.
    </p>
    <${ListPage}
      search=${search}
      base="/dashboard/templates"
      endpoint="/templates"
      label="Pages of templates"
      empty=${html`<${Empty} title="No templates yet">Create one below, write its subject and body, then publish it to send with it.</${Empty}>`}
      footer=${() =>
        html`<section class="card">
          <h2>New template</h2>
          <${CreateTemplate} />
        </section>`}
    >
      ${({ items }) => html`<${Table} rows=${items} columns=${TEMPLATE_COLUMNS} />`}
    </${ListPage}>`;
}

const TEMPLATE_COLUMNS = [
  {
    label: 'Name',
    cell: (template) =>
      html`<${Link} href=${`/dashboard/templates/${template.id}`}>${template.name}</${Link}>`,
  },
  { label: 'Alias', cell: (template) => (template.alias ? html`<code>${template.alias}</code>` : '—') },
  {
    label: 'Published',
    cell: (template) =>
      html`${template.published_version ? `v${template.published_version}` : html`<${Chip} status="draft" />`}
      ${template.has_unpublished_changes && template.published_version ? html` <span class="small muted">(changes not published)</span>` : null}`,
  },
  { label: 'Updated', cell: (template) => formatTime(template.updated_at) },
];

function CreateTemplate() {
  const [name, setName] = useState('');
  const [alias, setAlias] = useState('');
  const [error, setError] = useState(null);
  const errors = fieldErrors(error);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    try {
      const body = {
        name: name.trim(),
        subject: 'Hello {{ name }}',
        html: '<p>Hello {{ name }}</p>',
        variables: ['name'],
      };
      if (alias.trim()) body.alias = alias.trim();
      const template = await api('POST', '/templates', body);
      navigate(`/dashboard/templates/${template.id}`);
    } catch (failure) {
      setError(failure);
    }
  };
  return html`<form onSubmit=${submit} novalidate class="form">
    <${FormError} error=${error} fields=${['name', 'alias']} />
    <${Field} label="Name" name="name" errors=${errors}>
      ${(props) => html`<input ...${props} required value=${name} onInput=${(e) => setName(e.currentTarget.value)} placeholder="Welcome" />`}
    </${Field}>
    <${Field} label="Alias (optional)" name="alias" errors=${errors} hint="lowercase letters, digits, - and _; usable instead of the id when sending">
      ${(props) => html`<input ...${props} value=${alias} onInput=${(e) => setAlias(e.currentTarget.value)} placeholder="welcome" />`}
    </${Field}>
    <button data-writes type="submit" class="button-primary">Create template</button>
  </form>`;
}

const FIELDS = ['name', 'subject', 'html', 'text'];
const SAVE_DELAY_MS = 400;

/** Sample values for every declared variable, as the starting point of the preview's variables. */
const sampleVariables = (names) => {
  const sample = {};
  for (const name of names) {
    const path = name.split('.');
    let node = sample;
    path.forEach((part, index) => {
      if (index === path.length - 1) node[part] ??= part.replaceAll('_', ' ');
      else node = node[part] ??= {};
    });
  }
  return JSON.stringify(sample, null, 2);
};

/** The draft editor's fields: a refusal about one of them is shown next to it, any other above the form. */
const DRAFT_FIELDS = ['name', 'subject', 'html', 'text', 'variables'];

export function TemplatePage({ id }) {
  const template = useAsync(() => api('GET', `/templates/${encodeURIComponent(id)}`), [id]);
  if (template.error) {
    return html`<h1>Template</h1><${ErrorBanner} error=${template.error} />
      <p><${Link} href="/dashboard/templates">Back to templates</${Link}></p>`;
  }
  if (!template.data)
    return html`<h1>Template</h1>
      <${Loading} />`;
  return html`<${TemplateEditor} initial=${template.data} />`;
}

/**
 * The editor saves the draft as you type (a draft is never sent: sends use the published version) and
 * renders it through POST /v1/templates/{id}/render with the sample variables, so the preview is exactly
 * what the server would send — Liquid, escaping and the generated text included.
 */
function TemplateEditor({ initial }) {
  const [draft, setDraft] = useState(() =>
    Object.fromEntries(FIELDS.map((field) => [field, initial[field] ?? ''])),
  );
  const [variables, setVariables] = useState(() => initial.variables.join(', '));
  const [sample, setSample] = useState(() => sampleVariables(initial.variables));
  const [meta, setMeta] = useState(initial);
  const [saveState, setSaveState] = useState({ status: 'saved', error: null });
  const [preview, setPreview] = useState({ data: null, error: null });
  const [publishState, setPublishState] = useState({ result: null, error: null });
  const [versionsVersion, setVersionsVersion] = useState(0);
  const timer = useRef(null);
  const first = useRef(true);
  // An edit still waiting for its autosave when the page is left is saved then, not dropped.
  const pending = useRef(false);
  const latestSave = useRef(null);
  const templateId = initial.id;

  const render = async () => {
    let parsed;
    try {
      parsed = sample.trim() ? JSON.parse(sample) : {};
    } catch {
      setPreview((previous) => ({
        ...previous,
        error: { message: 'The sample variables are not valid JSON.', param: 'sample' },
      }));
      return;
    }
    try {
      setPreview({
        data: await api('POST', `/templates/${templateId}/render`, { variables: parsed }),
        error: null,
      });
    } catch (failure) {
      setPreview((previous) => ({ ...previous, error: failure }));
    }
  };

  const save = async () => {
    pending.current = false;
    setSaveState({ status: 'saving', error: null });
    const body = {
      name: draft.name,
      subject: draft.subject === '' ? null : draft.subject,
      html: draft.html === '' ? null : draft.html,
      text: draft.text === '' ? null : draft.text,
      variables: variables
        .split(',')
        .map((name) => name.trim())
        .filter(Boolean),
    };
    try {
      setMeta(await api('PATCH', `/templates/${templateId}`, body));
      setSaveState({ status: 'saved', error: null });
      await render();
    } catch (failure) {
      setSaveState({ status: 'error', error: failure });
    }
  };

  // Save (then render) a moment after the last keystroke; the first run only renders what is stored.
  useEffect(() => {
    if (first.current) {
      first.current = false;
      render();
      return;
    }
    setSaveState((previous) => ({ ...previous, status: 'pending' }));
    pending.current = true;
    clearTimeout(timer.current);
    timer.current = setTimeout(save, SAVE_DELAY_MS);
    return () => clearTimeout(timer.current);
  }, [draft, variables]);
  latestSave.current = save;
  useEffect(
    () => () => {
      if (pending.current) latestSave.current();
    },
    [],
  );
  useEffect(() => {
    const handle = setTimeout(render, SAVE_DELAY_MS);
    return () => clearTimeout(handle);
  }, [sample]);

  const publish = async () => {
    setPublishState({ result: null, error: null });
    clearTimeout(timer.current);
    pending.current = false;
    try {
      // The body carries the fields as shown, so what is published is what is on screen even if the last
      // autosave has not landed yet.
      const body = { name: draft.name, subject: draft.subject, html: draft.html, text: draft.text };
      const result = await api('POST', `/templates/${templateId}/publish`, body);
      setPublishState({ result, error: null });
      setMeta(await api('GET', `/templates/${templateId}`));
      setVersionsVersion((n) => n + 1);
    } catch (failure) {
      setPublishState({ result: null, error: failure });
    }
  };
  const remove = async () => {
    if (
      !(await confirmAction(
        `Delete the template "${meta.name}" and all its versions? Sends that name it will fail.`,
      ))
    )
      return;
    try {
      await api('DELETE', `/templates/${templateId}`);
      navigate('/dashboard/templates');
    } catch (failure) {
      setPublishState({ result: null, error: failure });
    }
  };

  // A render's Liquid error names the field too (`param: "html"`): it shows next to that field as well.
  const renderFieldError = preview.error?.param && preview.error.param !== 'sample' ? preview.error : null;
  const errors = fieldErrors(saveState.error ?? publishState.error ?? renderFieldError);
  const set = (field) => (event) => setDraft({ ...draft, [field]: event.currentTarget.value });
  const status = {
    pending: 'Unsaved changes…',
    saving: 'Saving draft…',
    saved: 'Draft saved',
    error: 'Draft not saved',
  }[saveState.status];

  return html`<p class="crumbs"><${Link} href="/dashboard/templates">Templates</${Link}> /</p>
    <h1>${meta.name}</h1>
    <div class="toolbar">
      <span class="muted">
        <code>${meta.id}</code>${meta.alias ? html` · alias <code>${meta.alias}</code>` : null}
        ${
          meta.published_version
            ? html`<span>
                · published <strong data-testid="published-version">v${meta.published_version}</strong></span
              >`
            : ' · never published'
        }
        ${meta.has_unpublished_changes ? ' · draft has unpublished changes' : ''}
      </span>
      <span class="save-state" role="status" data-state=${saveState.status}>${status}</span>
      <button data-writes type="button" class="button-primary" onClick=${publish}>Publish</button>
      <button data-writes type="button" class="button-danger" onClick=${remove}>Delete</button>
    </div>
    <${FormError} error=${saveState.error} fields=${DRAFT_FIELDS} />
    <${FormError} error=${publishState.error} fields=${DRAFT_FIELDS} />
    ${publishState.result ? html`<${Notice} kind="ok">Published version ${publishState.result.version} at ${formatTime(publishState.result.published_at)}.</${Notice}>` : null}
    <div class="editor">
      <form class="form" onSubmit=${(event) => event.preventDefault()} novalidate>
        <${Field} label="Name" name="name" errors=${errors}>
          ${(props) => html`<input ...${props} value=${draft.name} onInput=${set('name')} />`}
        </${Field}>
        <${Field} label="Subject" name="subject" errors=${errors}>
          ${(props) => html`<input ...${props} value=${draft.subject} onInput=${set('subject')} />`}
        </${Field}>
        <${Field} label="HTML" name="html" errors=${errors}>
          ${(props) => html`<textarea ...${props} rows="10" class="mono" spellcheck="false" value=${draft.html} onInput=${set('html')}></textarea>`}
        </${Field}>
        <${Field} label="Text (generated from the HTML when empty)" name="text" errors=${errors}>
          ${(props) => html`<textarea ...${props} rows="5" class="mono" value=${draft.text} onInput=${set('text')}></textarea>`}
        </${Field}>
        <${Field} label="Declared variables (comma-separated)" name="variables" errors=${errors} hint="Every one must be given when sending.">
          ${(props) => html`<input ...${props} value=${variables} onInput=${(e) => setVariables(e.currentTarget.value)} />`}
        </${Field}>
        <${Field} label="Sample variables for the preview (JSON)" name="sample" errors=${fieldErrors(preview.error?.param === 'sample' ? preview.error : null)}>
          ${(props) => html`<textarea ...${props} rows="4" class="mono" spellcheck="false" value=${sample} onInput=${(e) => setSample(e.currentTarget.value)}></textarea>`}
        </${Field}>
      </form>
      <section class="preview-pane" aria-label="Preview">
        <h2>Preview</h2>
        ${preview.error && preview.error.param !== 'sample' ? html`<${ErrorBanner} error=${preview.error} />` : null}
        ${
          preview.data
            ? html`<p>
                  <span class="muted">Subject: </span>
                  <strong data-testid="preview-subject">${preview.data.subject ?? '—'}</strong>
                </p>
                <${HtmlPreview} html=${preview.data.html ?? ''} title="Template preview" />
                <details>
                  <summary>Text version</summary>
                  <pre class="code" data-testid="preview-text">${preview.data.text ?? ''}</pre>
                </details>`
            : html`<${Loading} />`
        }
      </section>
    </div>
    <${Versions} templateId=${templateId} draft=${draft} version=${versionsVersion} />`;
}

function Versions({ templateId, draft, version }) {
  const versions = useAsync(
    () => api('GET', `/templates/${templateId}/versions?limit=100`),
    [templateId, version],
  );
  const list = versions.data?.data ?? [];
  const [left, setLeft] = useState('');
  const [right, setRight] = useState('');
  // Default comparison: the previous version against the latest (or the latest against the draft).
  useEffect(() => {
    if (list.length >= 2) {
      setLeft(String(list[1].version));
      setRight(String(list[0].version));
    } else if (list.length === 1) {
      setLeft(String(list[0].version));
      setRight('draft');
    }
  }, [versions.data]);
  const pick = (value) =>
    value === 'draft'
      ? { ...draft, version: 'draft' }
      : list.find((entry) => String(entry.version) === value);
  const a = pick(left);
  const b = pick(right);
  const options = html`<option value="draft">draft</option>
    ${list.map((entry) => html`<option value=${String(entry.version)}>v${entry.version}</option>`)}`;
  return html`<section class="card">
    <h2>Versions</h2>
    <${ErrorBanner} error=${versions.error} />
    ${
      versions.data && list.length === 0
        ? html`<${Empty} title="Not published yet">Publish to create version 1; each publish adds an immutable version you can compare here.</${Empty}>`
        : null
    }
    ${
      list.length
        ? html`<ul class="versions">
              ${list.map((entry) => html`<li data-version=${entry.version}><strong>v${entry.version}</strong> <span class="muted">${formatTime(entry.published_at)}</span> — ${entry.subject ?? ''}</li>`)}
            </ul>
            <div class="inline-form">
              <label for="diff-left">Compare</label>
              <select id="diff-left" value=${left} onChange=${(e) => setLeft(e.currentTarget.value)}>
                ${options}
              </select>
              <label for="diff-right">with</label>
              <select id="diff-right" value=${right} onChange=${(e) => setRight(e.currentTarget.value)}>
                ${options}
              </select>
            </div>
            ${a && b ? html`<${Diff} a=${a} b=${b} />` : null}`
        : null
    }
  </section>`;
}

function Diff({ a, b }) {
  const sections = ['subject', 'html', 'text'].map((field) => ({
    field,
    lines: diffLines(a[field] ?? '', b[field] ?? ''),
  }));
  const changed = sections.filter((section) => section.lines.some((line) => line.op !== ' '));
  if (changed.length === 0)
    return html`<p class="muted" data-testid="diff">No differences in subject, html or text.</p>`;
  return html`<div data-testid="diff">
    ${changed.map(
      (section) =>
        html`<h3>${section.field}</h3>
          <pre class="diff">
${section.lines.map(
              (line) =>
                html`<span class=${line.op === '+' ? 'add' : line.op === '-' ? 'del' : 'same'}
                  >${line.op} ${line.line}
                </span>`,
            )}</pre>`,
    )}
  </div>`;
}
