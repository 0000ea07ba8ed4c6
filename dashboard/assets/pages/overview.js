import { html, useEffect, useRef, useState } from '../html.js';
import { api, ApiError, query } from '../api.js';
import { Chip, ErrorBanner, Loading, Table, useAsync } from '../ui.js';

const DAYS = 7;
const SERIES = [
  ['sent', 'Sent', '#6366f1'],
  ['delivered', 'Delivered', '#16a34a'],
  ['bounced', 'Bounced', '#dc2626'],
  ['complained', 'Complained', '#ea580c'],
  // Unique per recipient and day, as GET /v1/stats counts them: a person's first open (or click) of an email;
  // the ones a machine made first (a privacy proxy's fetch, a link scanner) are shown apart, not added in.
  ['unique_opens', 'Unique opens', '#0891b2', 'unique_opens_automated'],
  ['unique_clicks', 'Unique clicks', '#a21caf', 'unique_clicks_automated'],
];
const ENGAGEMENT = ['unique_opens', 'unique_opens_automated', 'unique_clicks', 'unique_clicks_automated'];
const BOUNCE_TYPES = ['hard', 'soft', 'policy', 'undetermined'];
/** The per-day table: the day, each series, then the bounces split by type. */
const DAY_COLUMNS = [
  { label: 'Day', cell: (day) => day.date },
  ...SERIES.map(([key, label, , automated]) => ({
    label,
    // The automated ones only when there are any, under the count: the table keeps its width.
    cell: (day) =>
      automated && day[automated] > 0
        ? html`${day[key]} <span class="automated small muted">+${day[automated]} automated</span>`
        : day[key],
  })),
  {
    label: 'Bounces by type',
    class: 'small',
    cell: (day) => BOUNCE_TYPES.map((type) => `${type} ${day[`bounced_${type}`]}`).join(' · '),
  },
];
/**
 * Where a sender's reputation starts to suffer. Bounces: mailbox providers and relays (Amazon SES reviews an
 * account at 5 %) want under 2 %. Complaints: Gmail's bulk-sender rules, 0.1 % recommended, 0.3 % the limit.
 * GET /v1/stats may bring its own thresholds, which win.
 */
const THRESHOLDS = {
  bounce_rate: { recommended: 0.02, limit: 0.05 },
  complaint_rate: { recommended: 0.001, limit: 0.003 },
};

const dayOf = (date) => date.toISOString().slice(0, 10);
function lastDays() {
  const today = new Date();
  return Array.from({ length: DAYS }, (_, index) =>
    dayOf(new Date(today.getTime() - (DAYS - 1 - index) * 86_400_000)),
  );
}
const emptyCounts = () => ({
  sent: 0,
  delivered: 0,
  bounced: 0,
  complained: 0,
  ...Object.fromEntries(ENGAGEMENT.map((key) => [key, 0])),
  ...Object.fromEntries(BOUNCE_TYPES.map((type) => [`bounced_${type}`, 0])),
});
const rates = (counts) => ({
  bounce_rate: counts.sent + counts.bounced > 0 ? counts.bounced / (counts.sent + counts.bounced) : null,
  complaint_rate: counts.sent > 0 ? counts.complained / counts.sent : null,
});

/**
 * The one model the page draws, from either source: { source, days: [{ date, …counts }], total, rates,
 * thresholds, truncated? }. Adapting to another /v1/stats shape means changing only fromStats().
 */
function fromStats(body, days) {
  const byDate = new Map((body.days ?? []).map((day) => [day.date, day]));
  const rows = days.map((date) => ({ ...emptyCounts(), ...pick(byDate.get(date)), date }));
  const total = body.total ? { ...emptyCounts(), ...pick(body.total) } : sum(rows);
  const thresholds = { ...THRESHOLDS };
  if (body.thresholds?.complaint_rate) {
    thresholds.complaint_rate = {
      recommended: body.thresholds.complaint_rate_recommended ?? THRESHOLDS.complaint_rate.recommended,
      limit: body.thresholds.complaint_rate,
    };
  }
  const computed = rates(total);
  return {
    source: 'stats',
    days: rows,
    total,
    rates: {
      bounce_rate: body.total?.bounce_rate ?? computed.bounce_rate,
      complaint_rate: body.total?.complaint_rate ?? computed.complaint_rate,
    },
    thresholds,
  };
}
const pick = (counts) => {
  if (!counts) return {};
  const out = {};
  for (const key of Object.keys(emptyCounts())) if (typeof counts[key] === 'number') out[key] = counts[key];
  return out;
};
const sum = (rows) => {
  const total = emptyCounts();
  for (const row of rows) for (const key of Object.keys(total)) total[key] += row[key] ?? 0;
  return total;
};

const MAX_EVENT_PAGES = 50;
/**
 * Without /v1/stats, the unique counts as the server makes them, approximately: a recipient of an email
 * counts once a day, by a person or (when only a machine) as automated. Events are read newest first, so a
 * recipient's earlier event of the day replaces what a later one counted.
 */
function countUnique(row, seen, date, kind, event) {
  const data = event.data ?? {};
  const key = `${date} ${kind} ${data.email_id} ${String(data.recipient).toLowerCase()}`;
  const automated = Boolean((kind === 'opened' ? data.open : data.click)?.automated);
  const base = kind === 'opened' ? 'unique_opens' : 'unique_clicks';
  const previous = seen.get(key);
  // A person's open outweighs a machine's on the same day.
  if (previous === false || previous === automated) return;
  if (previous === true) row[`${base}_automated`] -= 1;
  row[automated ? `${base}_automated` : base] += 1;
  seen.set(key, automated);
}

/** Without /v1/stats: read the events of the last 7 days (newest first, 100 a page) and count them. */
async function fromEvents(days) {
  const rows = new Map(days.map((date) => [date, { ...emptyCounts(), date }]));
  const seen = new Map();
  const since = `${days[0]}T00:00:00.000Z`;
  let after;
  let truncated = false;
  for (let page = 0; ; page++) {
    if (page === MAX_EVENT_PAGES) {
      truncated = true;
      break;
    }
    const list = await api('GET', `/events${query({ limit: 100, after })}`);
    let older = false;
    for (const event of list.data) {
      if (event.created_at < since) {
        older = true;
        break;
      }
      const date = event.created_at.slice(0, 10);
      const row = rows.get(date);
      if (!row) continue;
      const kind = event.type.replace(/^email\./, '');
      if (kind in row) row[kind] += 1;
      if (kind === 'opened' || kind === 'clicked') countUnique(row, seen, date, kind, event);
      if (kind === 'bounced') {
        const type = BOUNCE_TYPES.includes(event.data?.bounce?.type)
          ? event.data.bounce.type
          : 'undetermined';
        row[`bounced_${type}`] += 1;
      }
    }
    if (older || !list.has_more || list.data.length === 0) break;
    after = list.data[list.data.length - 1].id;
  }
  const list = [...rows.values()];
  const total = sum(list);
  return { source: 'events', days: list, total, rates: rates(total), thresholds: THRESHOLDS, truncated };
}

async function loadOverview() {
  const days = lastDays();
  try {
    return fromStats(
      await api('GET', `/stats${query({ since: days[0], until: days[days.length - 1] })}`),
      days,
    );
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return fromEvents(days);
    throw error;
  }
}

export const percent = (rate) =>
  rate === null || rate === undefined ? '—' : `${(rate * 100).toFixed(rate < 0.01 ? 2 : 1)}\u00a0%`;

/** GET /v1/reputation; null when this server has none (404). */
export async function loadReputation() {
  try {
    return await api('GET', '/reputation');
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
}

/** A scope's rates against the limits, and what its pause holds, in one sentence. */
export function rateLine(scope, thresholds) {
  const holds =
    scope.state !== 'paused'
      ? ''
      : scope.holds === 'all'
        ? ' Every send from it is refused.'
        : ' Its broadcasts are refused; transactional mail still goes.';
  return (
    `hard bounces ${percent(scope.hard_bounce_rate)} (limit ${percent(thresholds.hard_bounce_limit)}), ` +
    `complaints ${percent(scope.complaint_rate)} (limit ${percent(thresholds.complaint_limit)}) ` +
    `over the last ${thresholds.window_days} days.${holds}`
  );
}

/**
 * The reputation breaker, when it has something to say: each project or domain past a warning threshold or
 * paused, with its rates, what a pause holds, and a Resume button (a full_access key).
 */
function Reputation() {
  const reputation = useAsync(loadReputation, []);
  const [error, setError] = useState(null);
  const body = reputation.data;
  if (!body) return html`<${ErrorBanner} error=${reputation.error} />`;
  const scopes = [body.project, ...body.domains].filter((scope) => scope.state !== 'ok');
  if (scopes.length === 0) return null;
  const paused = scopes.some((scope) => scope.state === 'paused');
  const resume = async () => {
    setError(null);
    try {
      await api('POST', '/reputation/resume', {});
      reputation.reload();
    } catch (failure) {
      setError(failure);
    }
  };
  const name = (scope) => (scope.domain === null ? 'This project' : scope.domain);
  return html`<section
    class=${`banner ${paused ? 'banner-error' : 'banner-info'}`}
    aria-labelledby="reputation-title"
    data-testid="reputation"
  >
    <h2 id="reputation-title">
      ${paused ? 'Sending is paused' : 'Bounce or complaint rate above the warning threshold'}
    </h2>
    <${ErrorBanner} error=${error} />
    <ul>
      ${scopes.map(
        (scope) =>
          html`<li data-scope=${scope.domain ?? 'project'}>
            <strong>${name(scope)}</strong>${' '}<${Chip}
              status=${scope.state}
            />${`: ${rateLine(scope, body.thresholds)}`}
          </li>`,
      )}
    </ul>
    ${
      paused
        ? html`<p class="small">
              Find out why (the bounced and complained emails, the list they went to) before resuming.
            </p>
            <button data-writes type="button" onClick=${resume}>Resume sending</button>`
        : null
    }
  </section>`;
}

export function OverviewPage() {
  const overview = useAsync(loadOverview, []);
  const model = overview.data;
  return html`<h1>Overview</h1>
    <p class="lead">The last ${DAYS} days (UTC).</p>
    <${Reputation} />
    <${ErrorBanner} error=${overview.error}><button type="button" onClick=${overview.reload}>Retry</button></${ErrorBanner}>
    ${overview.loading && !model ? html`<${Loading} />` : null}
    ${
      model
        ? html`<p class="small muted" data-testid="overview-source" data-source=${model.source}>
              ${
                model.source === 'stats'
                  ? 'Counted by the server (GET /v1/stats).'
                  : `This server has no GET /v1/stats: counted here from the events of the last ${DAYS} days (GET /v1/events).`
              }
              ${model.truncated ? ` Only the newest ${MAX_EVENT_PAGES * 100} events were read.` : ''}
            </p>
            <div class="stats">
              ${SERIES.map(
                ([key, label, color, automated]) =>
                  html`<div class="stat" data-stat=${key}>
                    <span class="swatch" style=${{ background: color }}></span>
                    <span class="stat-label">${label}</span>
                    <strong class="stat-value">${model.total[key]}</strong>
                    ${
                      automated
                        ? html`<span class="stat-detail small muted" data-stat=${automated}>
                            + <span class="stat-value-automated">${model.total[automated]}</span> automated
                          </span>`
                        : null
                    }
                  </div>`,
              )}
            </div>
            <div class="grid-2">
              <${Rate}
                label="Bounce rate"
                rate=${model.rates.bounce_rate}
                threshold=${model.thresholds.bounce_rate}
                detail="bounced ÷ (sent + bounced)"
              />
              <${Rate}
                label="Complaint rate"
                rate=${model.rates.complaint_rate}
                threshold=${model.thresholds.complaint_rate}
                detail="complained ÷ sent"
              />
            </div>
            <section class="card">
              <h2>Per day</h2>
              <${Chart} days=${model.days} />
              <${Table}
                class="numbers"
                label="Per day, in numbers"
                rows=${model.days}
                columns=${DAY_COLUMNS}
              />
            </section>`
        : null
    }`;
}

function Rate({ label, rate, threshold, detail }) {
  const level =
    rate === null ? 'muted' : rate >= threshold.limit ? 'bad' : rate >= threshold.recommended ? 'warn' : 'ok';
  return html`<section class=${`card rate rate-${level}`}>
    <h2>${label}</h2>
    <p class="rate-value">${percent(rate)}</p>
    <p class="small muted">
      ${detail}. Keep it under ${percent(threshold.recommended)}; above ${percent(threshold.limit)} mailbox
      providers start refusing your mail.
    </p>
    <meter
      min="0"
      max=${threshold.limit * 2}
      low=${threshold.recommended}
      high=${threshold.limit}
      optimum="0"
      value=${rate ?? 0}
      aria-label=${`${label} against its limit`}
    ></meter>
  </section>`;
}

/** Grouped bars per day, drawn in SVG (no chart library, no inline style: attributes only). */
function Chart({ days }) {
  // On a phone the chart scrolls sideways: start at the right end, where today is.
  const scroller = useRef(null);
  useEffect(() => {
    if (scroller.current) scroller.current.scrollLeft = scroller.current.scrollWidth;
  }, [days]);
  const width = 700;
  const height = 220;
  const pad = { left: 36, bottom: 24, top: 8 };
  const max = Math.max(1, ...days.flatMap((day) => SERIES.map(([key]) => day[key])));
  const groupWidth = (width - pad.left) / days.length;
  const barWidth = (groupWidth - 8) / SERIES.length;
  const y = (value) => height - pad.bottom - (value / max) * (height - pad.bottom - pad.top);
  return html`<figure class="chart">
    <div class="chart-scroll" ref=${scroller} role="region" aria-label="Chart per day" tabindex="0">
      <svg
        viewBox=${`0 0 ${width} ${height}`}
        role="img"
        aria-label="Sent, delivered, bounced, complained, unique opens and unique clicks per day"
      >
        <line
          x1=${pad.left}
          x2=${width}
          y1=${height - pad.bottom}
          y2=${height - pad.bottom}
          stroke="#cbd5e1"
        />
        <text x="4" y=${pad.top + 10} class="axis">${max}</text>
        <text x="4" y=${height - pad.bottom} class="axis">0</text>
        ${days.map(
          (day, index) =>
            html`<g>
              ${SERIES.map(([key, label, color], series) => {
                const top = y(day[key]);
                return html`<rect
                  x=${pad.left + index * groupWidth + 4 + series * barWidth}
                  y=${top}
                  width=${Math.max(1, barWidth - 1)}
                  height=${height - pad.bottom - top}
                  fill=${color}
                  ><title>${day.date} ${label}: ${day[key]}</title></rect
                >`;
              })}
              <text
                x=${pad.left + index * groupWidth + groupWidth / 2}
                y=${height - 6}
                text-anchor="middle"
                class="axis"
                >${day.date.slice(5)}</text
              >
            </g>`,
        )}
      </svg>
    </div>
    <figcaption class="legend">
      ${SERIES.map(([, label, color]) => html`<span><span class="swatch" style=${{ background: color }}></span>${label}</span>`)}
    </figcaption>
  </figure>`;
}
