import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import { get, post, seg } from '../api'
import { TimeChart, units, type Line } from '../chart'
import { follow, useProjectLoad } from '../events'
import { Badge, CopyField, Empty, ErrorBox, Table, message, plural, useListAction, useLoad, when } from '../ui'
import { bytes, Meter } from './overview'

// The shapes of the observability API (docs/api-decisions.md "Observability"; the json tags of
// appliance/observability.go, samples.go, alerts.go, advisor.go, pglog and pgstat). The generated client
// (clients/typescript) does not have them yet: once it is regenerated these become Schemas[...].

type ActiveQuery = { pid: number; username: string; state: string; query: string; wait_event_type: string; wait_event: string; duration_ms: number }
type Statement = { query_id: string; query: string; calls: number; rows: number; total_time_ms: number; mean_time_ms: number }
type Snapshot = {
  active_queries: ActiveQuery[]
  alerts: string[]
  connection_count: number
  connection_limit: number
  connection_usage_percent: number
  database_size_bytes: number
  storage_limit_bytes: number
  storage_usage_percent: number
  pg_stat_statements: boolean
  slow_queries: Statement[]
  sampled_at: string
}
type Sample = {
  sampled_at: string
  connections: number
  connection_limit: number
  storage_bytes: number
  storage_limit_bytes: number
  mem_usage_bytes: number
  mem_limit_bytes: number
  cpu_cores_used: number
  cpu_quota_cores: number
  cache_hit_ratio: number
  tps: number
}
type TopQuery = { query_hash: string; query: string; calls: number; rows: number; mean_exec_ms: number; total_exec_ms: number }
type QueryPoint = { captured_at: string; calls: number; rows: number; total_exec_ms: number; mean_exec_ms: number; calls_per_sec: number }
type QueryDetail = {
  query_hash: string
  query: string
  window_calls: number
  window_rows: number
  window_total_exec_ms: number
  window_mean_exec_ms: number
  points: QueryPoint[]
}
type Alert = {
  id: string
  kind: string
  severity: string
  message: string
  triggered_at: string
  acknowledged_at: string | null
  resolved_at: string | null
}
type LogEntry = {
  timestamp: string
  severity: string
  message: string
  cursor: string
  sqlstate?: string
  detail?: string
  hint?: string
  statement?: string
  user?: string
  pid?: number
}
type Suggestion = { ddl: string; index_method: string; table: string; estimated_cost_reduction_pct: number; estimated_size_bytes: number; query_id: string }
type Advice = {
  available: boolean
  cost_estimates_available: boolean
  size_estimates_available: boolean
  missing_extensions: string[] | null
  reason: string
  suggestions: Suggestion[] | null
  computed_at: string
}
type UnusedIndex = { schema: string; table: string; index: string; definition: string; drop_statement: string; size_bytes: number; index_scans: number }
type RedundantIndex = { schema: string; table: string; index: string; covered_by: string; definition: string; drop_statement: string; size_bytes: number }
type Hygiene = {
  available: boolean
  reason: string
  observation_window_seconds: number
  reclaimable_bytes: number
  stats_reset_at: string | null
  unused_indexes: UnusedIndex[] | null
  redundant_indexes: RedundantIndex[] | null
}

/** useLive is useLoad refreshed every ms while the page is visible (and at once when it shows again). */
function useLive<T>(load: () => Promise<T>, deps: unknown[], ms: number) {
  const r = useLoad(load, deps)
  useEffect(() => {
    const tick = () => {
      if (!document.hidden) r.reload()
    }
    const t = setInterval(tick, ms)
    document.addEventListener('visibilitychange', tick)
    return () => {
      clearInterval(t)
      document.removeEventListener('visibilitychange', tick)
    }
  }, [r.reload, ms])
  return r
}

/** duration writes milliseconds as a person reads them: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min. */
function duration(ms: number): string {
  if (ms < 1000) return Math.round(ms) + ' ms'
  const s = ms / 1000
  if (s < 60) return s.toFixed(1) + ' s'
  if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s'
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min'
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h'
}

/** millis writes an execution time: 0.42 ms, 12 ms, 3.4 s. */
const millis = (ms: number) => units.ms.format(ms)

const count = (n: number) => n.toLocaleString()

/** oneLine is a statement's text with its whitespace collapsed (for a cut-short view). */
const oneLine = (q: string) => q.replace(/\s+/g, ' ').trim()

/** QueryText shows a statement on at most three lines (whitespace collapsed), with a button to see all of it
 * as written when it does not fit. */
function QueryText({ text }: { text: string }) {
  const [open, setOpen] = useState(false)
  const [cut, setCut] = useState(false)
  const el = useRef<HTMLElement>(null)
  useEffect(() => {
    const c = el.current
    if (!c || open) return
    const check = () => setCut(c.scrollHeight > c.clientHeight + 1)
    check()
    const ro = new ResizeObserver(check)
    ro.observe(c)
    return () => ro.disconnect()
  }, [text, open])
  return (
    <div class="qtext">
      <code ref={el} class={open ? undefined : 'clamped'}>
        {open ? text : oneLine(text)}
      </code>
      {(cut || open) && (
        <button class="link" aria-expanded={open} onClick={() => setOpen(!open)}>
          {open ? 'Show less' : 'Show all'}
        </button>
      )}
    </div>
  )
}

const windows = [
  { hours: 1, label: '1 h' },
  { hours: 6, label: '6 h' },
  { hours: 24, label: '24 h' },
  { hours: 168, label: '7 d' },
  { hours: 720, label: '30 d' },
]

/** The project's monitoring: its server now, its alerts, its history, its top queries, its log and index advice. */
export function MonitoringTab({ id, path }: { id: string; path: string }) {
  const [hours, setHours] = useState(24)
  return (
    <>
      <Now path={path} />
      <Alerts id={id} path={path} />
      <section class="card" aria-labelledby="history-heading">
        <div class="card-head">
          <h2 id="history-heading">History</h2>
          <div class="segmented" role="group" aria-label="Window">
            {windows.map((w) => (
              <button aria-pressed={w.hours === hours} onClick={() => setHours(w.hours)} title={'The last ' + w.label}>
                {w.label}
              </button>
            ))}
          </div>
        </div>
        <History path={path} hours={hours} />
      </section>
      <TopQueries path={path} hours={Math.min(hours, 168)} />
      <LogTail path={path} />
      <IndexAdvice id={id} path={path} />
    </>
  )
}

/** Now is the live snapshot of the server, refreshed every 10 s while the page is visible. */
function Now({ path }: { path: string }) {
  const snap = useLive(() => get<{ observability: Snapshot }>(path + '/observability'), [path], 10000)
  const o = snap.data?.observability
  return (
    <section class="card" aria-labelledby="now-heading">
      <div class="card-head">
        <h2 id="now-heading">Now</h2>
        {o && <span class="hint">as of {new Date(o.sampled_at).toLocaleTimeString()} · every 10 s</span>}
      </div>
      <ErrorBox error={snap.error} />
      {o && (
        <>
          {o.alerts.length > 0 && (
            <ul class="alerts-now" aria-label="Alerts in force">
              {o.alerts.map((a) => (
                <li>{a}</li>
              ))}
            </ul>
          )}
          <div class="meters">
            <Meter label="Connections" value={o.connection_count} limit={o.connection_limit} show={String} percent={o.connection_usage_percent} />
            <Meter label="Storage" value={o.database_size_bytes} limit={o.storage_limit_bytes} show={bytes} percent={o.storage_usage_percent} />
          </div>
          <h3>Active queries</h3>
          {o.active_queries.length === 0 ? (
            <Empty>No query is running.</Empty>
          ) : (
            <Table cols={['PID', { label: 'User', sm: true }, 'State', { label: 'Wait event', sm: true }, 'Duration', 'Query']}>
              {o.active_queries.map((q) => (
                <tr key={q.pid}>
                  <td>{q.pid}</td>
                  <td class="sm-hide">{q.username}</td>
                  <td>{q.state}</td>
                  <td class="sm-hide">{q.wait_event ? `${q.wait_event_type}: ${q.wait_event}` : '-'}</td>
                  <td class="num">{duration(q.duration_ms)}</td>
                  <td class="query-cell">
                    <QueryText text={q.query} />
                  </td>
                </tr>
              ))}
            </Table>
          )}
          <h3>Slowest statements</h3>
          {!o.pg_stat_statements ? (
            <Empty>pg_stat_statements is not installed in the database: enable it on the Extensions tab to see the slowest statements and the top queries.</Empty>
          ) : o.slow_queries.length === 0 ? (
            <Empty>No statements recorded since the statistics were reset.</Empty>
          ) : (
            <Table cols={['Statement', 'Mean', 'Calls', { label: 'Total', sm: true }, { label: 'Rows', sm: true }]}>
              {o.slow_queries.map((q) => (
                <tr key={q.query_id}>
                  <td class="query-cell">
                    <QueryText text={q.query} />
                  </td>
                  <td class="num">{millis(q.mean_time_ms)}</td>
                  <td class="num">{count(q.calls)}</td>
                  <td class="num sm-hide">{millis(q.total_time_ms)}</td>
                  <td class="num sm-hide">{count(q.rows)}</td>
                </tr>
              ))}
            </Table>
          )}
          <p class="hint">Since the statistics were last reset; the appliance's own sessions are left out.</p>
        </>
      )}
    </section>
  )
}

const kinds: Record<string, string> = {
  storage: 'Storage',
  connections: 'Connections',
  long_transaction: 'Long transaction',
  backup_failed: 'Backup failed',
}

/** Alerts lists the alerts in force and those resolved in the last 7 days; each can be acknowledged. */
function Alerts({ id, path }: { id: string; path: string }) {
  // alert.triggered and alert.resolved come on the project's event stream: the list follows it.
  const list = useProjectLoad(id, () => get<{ alerts: Alert[] }>(path + '/alerts'), [path])
  const [error, act] = useListAction(list)
  const [done, setDone] = useState('')
  return (
    <section class="card" aria-labelledby="alerts-heading">
      <h2 id="alerts-heading">Alerts</h2>
      <ErrorBox error={list.error || error} />
      {done && (
        <p role="status" class="ok-banner">
          {done}
        </p>
      )}
      {list.data && list.data.alerts.length === 0 && <Empty>No alerts in the last 7 days.</Empty>}
      {list.data && list.data.alerts.length > 0 && (
        <Table cols={['Alert', 'Severity', { label: 'Triggered', sm: true }, { label: 'Resolved', sm: true }, { label: 'Acknowledge', hidden: true }]}>
          {list.data.alerts.map((a) => (
            <tr key={a.id}>
              <td>
                <strong>{kinds[a.kind] ?? a.kind}</strong>
                <div>{a.message}</div>
                <div class="hint sm-only">
                  {when(a.triggered_at)} – {a.resolved_at ? 'resolved ' + when(a.resolved_at) : 'in force'}
                </div>
                {a.acknowledged_at && <div class="hint">Acknowledged {when(a.acknowledged_at)}</div>}
              </td>
              <td>
                <Badge value={a.severity} />
              </td>
              <td class="sm-hide">{when(a.triggered_at)}</td>
              <td class="sm-hide">{a.resolved_at ? when(a.resolved_at) : <span class="warning">in force</span>}</td>
              <td>
                {!a.acknowledged_at && (
                  <button
                    aria-label={`Acknowledge the ${(kinds[a.kind] ?? a.kind).toLowerCase()} alert`}
                    onClick={() =>
                      act(async () => {
                        setDone('')
                        await post(path + '/alerts/' + seg(a.id) + '/acknowledge')
                        setDone(`${kinds[a.kind] ?? a.kind} alert acknowledged: it stays until its condition clears.`)
                      })
                    }
                  >
                    Acknowledge
                  </button>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  )
}

/** series turns samples into a chart's times and the values of fields, with a break (null) where samples are missing. */
function series(samples: Sample[], hours: number, fields: (keyof Sample)[]): { times: number[]; values: (number | null)[][] } {
  // Points are a minute apart, or hours*60/720 minutes when the window is downsampled: a gap of more than
  // three steps is a time the sampler had no reading (the appliance or the server was down).
  const step = Math.max(60, (hours * 3600) / 720)
  const times: number[] = []
  const values: (number | null)[][] = fields.map(() => [])
  let prev = 0
  for (const s of samples) {
    const t = Date.parse(s.sampled_at) / 1000
    if (prev && t - prev > 3 * step) {
      times.push(prev + step)
      values.forEach((v) => v.push(null))
    }
    times.push(t)
    fields.forEach((f, i) => values[i].push(s[f] as number))
    prev = t
  }
  return { times, values }
}

/** summary is what a chart says to a screen reader: the latest value and the peak of its first line. */
function summary(values: (number | null)[], format: (n: number) => string, limit?: (number | null)[]): string {
  const v = values.filter((x): x is number => x != null)
  if (v.length === 0) return 'no values'
  const l = limit?.filter((x): x is number => x != null).pop()
  return `latest ${format(v[v.length - 1])}${l != null ? ' of ' + format(l) : ''}, peak ${format(Math.max(...v))}`
}

/** Suspended is a period in which the project was suspended (scale to zero). */
type Suspended = { from: string; to: string; ongoing: boolean }

/** withBands adds the bands' ends to a chart's times (with no values), so a suspension after the last
 * sample still shows. */
function withBands(times: number[], values: (number | null)[][], bands: [number, number][]) {
  const extra = bands.flat().filter((t) => !times.includes(t))
  if (extra.length === 0) return { times, values }
  const rows = times.map((t, i) => ({ t, v: values.map((vs) => vs[i]) }))
  for (const t of extra) rows.push({ t, v: values.map(() => null) })
  rows.sort((a, b) => a.t - b.t)
  return { times: rows.map((r) => r.t), values: values.map((_, j) => rows.map((r) => r.v[j])) }
}

/** History charts the minutely samples of the window, its suspensions (scale to zero) shaded. */
function History({ path, hours }: { path: string; hours: number }) {
  const hist = useLive(() => get<{ samples: Sample[]; suspended?: Suspended[] }>(path + '/observability/history?hours=' + hours), [path, hours], 60000)
  const charts = useMemo(() => {
    const samples = hist.data?.samples ?? []
    if (samples.length === 0) return null
    const bands = (hist.data?.suspended ?? []).map((s): [number, number] => [Date.parse(s.from) / 1000, Date.parse(s.to) / 1000])
    const raw = series(samples, hours, [
      'connections', 'connection_limit', 'tps', 'cache_hit_ratio', 'storage_bytes', 'storage_limit_bytes',
      'cpu_cores_used', 'cpu_quota_cores', 'mem_usage_bytes', 'mem_limit_bytes',
    ])
    const { times, values } = withBands(raw.times, raw.values, bands)
    const [conns, connLimit, tps, hit, storage, storageLimit, cpu, quota, mem, memLimit] = values
    const pair = (label: string, v: (number | null)[], limitLabel: string, l: (number | null)[]): Line[] => [
      { label, values: v },
      { label: limitLabel, values: l, limit: true },
    ]
    return { times, conns, connLimit, tps, hit, storage, storageLimit, cpu, quota, mem, memLimit, pair, n: samples.length, bands }
  }, [hist.data, hours])
  return (
    <>
      <ErrorBox error={hist.error} />
      {hist.data && !charts && (
        <Empty>No samples yet in this window. The appliance samples the server once a minute; the first point appears a minute after the first reading.</Empty>
      )}
      {charts && (
        <div class="charts">
          <TimeChart title="Connections" times={charts.times} unit={units.count}
            lines={charts.pair('Connections', charts.conns, 'Limit', charts.connLimit)}
            summary={summary(charts.conns, units.count.format, charts.connLimit)} bands={charts.bands} />
          <TimeChart title="Transactions per second" times={charts.times} unit={units.rate}
            lines={[{ label: 'TPS', values: charts.tps }]} summary={summary(charts.tps, units.rate.format)} bands={charts.bands} />
          <TimeChart title="Cache hit ratio" times={charts.times} unit={units.ratio}
            lines={[{ label: 'Hit ratio', values: charts.hit }]} summary={summary(charts.hit, units.ratio.format)} bands={charts.bands} />
          <TimeChart title="Storage" times={charts.times} unit={units.bytes}
            lines={charts.pair('Database size', charts.storage, 'Limit', charts.storageLimit)}
            summary={summary(charts.storage, units.bytes.format, charts.storageLimit)} bands={charts.bands} />
          <TimeChart title="CPU (cores used)" times={charts.times} unit={units.cores}
            lines={charts.pair('Cores used', charts.cpu, 'Quota', charts.quota)}
            summary={summary(charts.cpu, units.cores.format, charts.quota)} bands={charts.bands} />
          <TimeChart title="Memory" times={charts.times} unit={units.bytes}
            lines={charts.pair('Memory (PSS)', charts.mem, 'Limit', charts.memLimit)}
            summary={summary(charts.mem, units.bytes.format, charts.memLimit)} bands={charts.bands} />
        </div>
      )}
      {charts && (
        <p class="hint">
          {plural(charts.n, 'sample')}, your local time. Drag across a chart to zoom in, double-click to zoom out; the dashed
          lines are the plan's limits (memory and CPU are the plan's size, not enforced on this machine).
          {charts.bands.length > 0 && (
            <> Shaded: {plural(charts.bands.length, 'period')} the project was suspended (scale to zero: no server, no samples){(hist.data?.suspended ?? []).some((s) => s.ongoing) ? ', suspended now' : ''}.</>
          )}
        </p>
      )}
    </>
  )
}

/** sameStatement reports whether a logged statement is an instance of pg_stat_statements' text, whose
 * constants are $1, $2, ... (each a quoted string or one token in the logged text; white space and a
 * final semicolon aside). */
function sameStatement(normalized: string, logged: string): boolean {
  const esc = (t: string) => t.trim().replace(/[.*+?^{}()|[\]\\]/g, '\\$&').replace(/\s+/g, '\\s+').replace(/\$/g, '\\$')
  const parts = normalized.trim().replace(/;\s*$/, '').split(/\$\d+/).map(esc)
  try {
    return new RegExp('^\\s*' + parts.join("\\s*(?:'(?:[^']|'')*'|[^\\s,()']+)\\s*") + '\\s*;?\\s*$', 'i').test(logged)
  } catch {
    return false
  }
}

/** TopQueries ranks the statements by their total execution time in the window; one opens its detail. A
 * log line's link opens its statement's detail: ?query_id= (the server turns pg_stat_statements' queryid
 * into the query hash) or, for a line without one, ?statement= (matched against the ranked texts). */
function TopQueries({ path, hours }: { path: string; hours: number }) {
  const top = useLive(() => get<{ queries: TopQuery[] }>(path + '/observability/queries?hours=' + hours), [path, hours], 60000)
  const [open, setOpen] = useState('')
  const [logged] = useState(() => {
    const q = new URLSearchParams(location.search)
    return { id: q.get('query_id') ?? '', text: q.get('statement') ?? '' }
  })
  const [note, setNote] = useState('')
  useEffect(() => {
    if (!logged.id) return
    get<{ statement: { query_hash: string } }>(path + '/observability/statements/' + seg(logged.id)).then(
      (r) => setOpen(r.statement.query_hash),
      (e) => setNote(`The log line's query (id ${logged.id}): ${message(e)}`),
    )
  }, [path, logged])
  const [matched, setMatched] = useState(false)
  useEffect(() => {
    if (!logged.text || logged.id || matched || !top.data) return
    setMatched(true)
    const q = top.data.queries.find((q) => sameStatement(q.query, logged.text))
    if (q) setOpen(q.query_hash)
    else setNote('The log line\'s statement is not among the top queries of this window (a statement that failed is not counted).')
  }, [top.data, logged, matched])
  return (
    <section class="card" aria-labelledby="top-heading">
      <div class="card-head">
        <h2 id="top-heading">Top queries</h2>
        <span class="hint">by total execution time, the last {hours === 168 ? '7 days' : hours === 1 ? 'hour' : hours + ' hours'}</span>
      </div>
      <ErrorBox error={top.error} />
      {note && (
        <p class="notice card" role="status">
          {note}
        </p>
      )}
      {top.data && top.data.queries.length === 0 && (
        <Empty>No statements in this window. The appliance snapshots pg_stat_statements every 5 minutes; statements show from the second snapshot.</Empty>
      )}
      {top.data && top.data.queries.length > 0 && (
        <Table cols={['Query', 'Calls', 'Total', { label: 'Mean', sm: true }, { label: 'Rows', sm: true }]} page={10}>
          {top.data.queries.map((q) => (
            <tr key={q.query_hash} class={q.query_hash === open ? 'selected' : undefined}>
              <td class="query-cell">
                <button class="link query-link" aria-expanded={q.query_hash === open} aria-controls={q.query_hash === open ? 'query-detail' : undefined} onClick={() => setOpen(q.query_hash === open ? '' : q.query_hash)}>
                  <code>{oneLine(q.query) || q.query_hash}</code>
                </button>
              </td>
              <td class="num">{count(q.calls)}</td>
              <td class="num">{millis(q.total_exec_ms)}</td>
              <td class="num sm-hide">{millis(q.mean_exec_ms)}</td>
              <td class="num sm-hide">{count(q.rows)}</td>
            </tr>
          ))}
        </Table>
      )}
      {open && <QueryDetailView path={path} hash={open} hours={hours} close={() => setOpen('')} />}
    </section>
  )
}

function QueryDetailView({ path, hash, hours, close }: { path: string; hash: string; hours: number; close: () => void }) {
  const d = useLoad(() => get<{ query: QueryDetail }>(path + '/observability/queries/' + seg(hash) + '?hours=' + hours), [path, hash, hours])
  const heading = useRef<HTMLHeadingElement>(null)
  useEffect(() => heading.current?.focus(), [hash])
  const q = d.data?.query
  const chart = useMemo(() => {
    if (!q || q.points.length === 0) return null
    const times = q.points.map((p) => Date.parse(p.captured_at) / 1000)
    const lines: Line[] = [
      { label: 'Calls per second', values: q.points.map((p) => p.calls_per_sec) },
      { label: 'Mean time', values: q.points.map((p) => (p.calls > 0 ? p.mean_exec_ms : null)), right: true },
    ]
    return { times, lines }
  }, [q])
  return (
    <div class="query-detail" id="query-detail" role="region" aria-labelledby="query-detail-heading">
      <div class="card-head">
        <h3 id="query-detail-heading" ref={heading} tabIndex={-1}>
          Query details
        </h3>
        <button onClick={close}>Close</button>
      </div>
      <ErrorBox error={d.error} />
      {q && (
        <>
          <pre class="query-full">{q.query}</pre>
          <dl class="facts">
            <dt>Calls</dt>
            <dd>{count(q.window_calls)}</dd>
            <dt>Total time</dt>
            <dd>{millis(q.window_total_exec_ms)}</dd>
            <dt>Mean time</dt>
            <dd>{millis(q.window_mean_exec_ms)}</dd>
            <dt>Rows</dt>
            <dd>{count(q.window_rows)}</dd>
            <dt>Query hash</dt>
            <dd>
              <code>{q.query_hash}</code>
            </dd>
          </dl>
          {chart ? (
            <TimeChart title="Calls per second and mean time, per 5-minute snapshot" times={chart.times} lines={chart.lines}
              unit={units.rate} unit2={units.ms}
              summary={summary(chart.lines[0].values, units.rate.format) + '; mean time ' + summary(chart.lines[1].values, units.ms.format)} />
          ) : (
            <Empty>No snapshot in this window measured the statement yet.</Empty>
          )}
        </>
      )}
    </div>
  )
}

const SEVERITIES = ['debug', 'log', 'info', 'notice', 'warning', 'error', 'fatal', 'panic']
/** MAX_LINES: the tail keeps the newest this many entries on the page. */
const MAX_LINES = 1000

/** LogTail follows the server's log live (the logs stream, through the dashboard's one SSE client). */
function LogTail({ path }: { path: string }) {
  const [sev, setSev] = useState<string[]>(SEVERITIES)
  const [paused, setPaused] = useState(false)
  const [entries, setEntries] = useState<LogEntry[]>([])
  const [error, setError] = useState('')
  const cursor = useRef('') // the last entry shown: a resumed tail starts after it
  const box = useRef<HTMLDivElement>(null)
  const stick = useRef(true) // the view follows the newest line unless the reader scrolled up
  const filter = sev.length === SEVERITIES.length ? '' : sev.join(',')
  // Another filter starts over: the window's newest matching entries, then what comes.
  useEffect(() => {
    setEntries([])
    cursor.current = ''
  }, [path, filter])
  useEffect(() => {
    if (paused || sev.length === 0) return
    const stop = new AbortController()
    const q = new URLSearchParams()
    if (filter) q.set('severity', filter)
    if (cursor.current) q.set('cursor', cursor.current)
    const qs = q.toString()
    let pending: LogEntry[] = []
    let timer = 0
    const flush = () => {
      timer = 0
      const add = pending
      pending = []
      setEntries((prev) => {
        const all = prev.concat(add)
        return all.length > MAX_LINES ? all.slice(all.length - MAX_LINES) : all
      })
    }
    follow(path + '/logs/stream' + (qs ? '?' + qs : ''), {
      signal: stop.signal,
      onStatus: setError,
      onEvent: (type, data, id) => {
        if (type !== 'log' || !data) return
        cursor.current = id
        pending.push(data as LogEntry)
        if (pending.length > MAX_LINES) pending = pending.slice(pending.length - MAX_LINES)
        if (!timer) timer = window.setTimeout(flush, 100) // one render per burst, not per line
      },
    })
    return () => {
      stop.abort()
      clearTimeout(timer)
    }
  }, [path, filter, paused, sev.length === 0])
  useEffect(() => {
    const el = box.current
    if (el && stick.current) el.scrollTop = el.scrollHeight
  }, [entries])
  useEffect(() => {
    const el = box.current
    if (!el) return
    const ro = new ResizeObserver(() => {
      if (stick.current) el.scrollTop = el.scrollHeight
    })
    ro.observe(el)
    return () => ro.disconnect()
  }, [])
  const toggle = (s: string) => setSev(sev.includes(s) ? sev.filter((x) => x !== s) : SEVERITIES.filter((x) => x === s || sev.includes(x)))
  return (
    <section class="card" aria-labelledby="log-heading">
      <div class="card-head">
        <h2 id="log-heading">Server log</h2>
        <span class="hint" role="status">
          {paused ? 'paused' : error ? 'reconnecting…' : 'live'} · {plural(entries.length, 'line')}
        </span>
      </div>
      <fieldset class="scopes severities">
        <legend>Severities</legend>
        {SEVERITIES.map((s) => (
          <label class="check">
            <input type="checkbox" checked={sev.includes(s)} onChange={() => toggle(s)} /> <span class={'sev sev-' + s}>{s}</span>
          </label>
        ))}
      </fieldset>
      <div class="actions">
        <button aria-pressed={paused} onClick={() => setPaused(!paused)}>
          {paused ? 'Resume' : 'Pause'}
        </button>
        <button onClick={() => setEntries([])}>Clear</button>
        <button class="link" onClick={() => setSev(sev.length === SEVERITIES.length ? ['warning', 'error', 'fatal', 'panic'] : SEVERITIES)}>
          {sev.length === SEVERITIES.length ? 'Warnings and errors only' : 'All severities'}
        </button>
      </div>
      <ErrorBox error={error} />
      {sev.length === 0 && <p class="hint">Choose at least one severity.</p>}
      <div
        class="log"
        ref={box}
        role="log"
        aria-label="Server log lines"
        tabIndex={0}
        onScroll={(e) => {
          const el = e.currentTarget as HTMLDivElement
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40
        }}
      >
        {entries.length === 0 && <div class="log-empty">{paused ? 'Paused.' : 'No log lines in the last hour yet; new ones appear here as the server writes them.'}</div>}
        {entries.map((e) => (
          <LogLine key={e.cursor} e={e} />
        ))}
      </div>
      <p class="hint">The last hour's lines, then each new one as the server writes it (passwords masked; the appliance's own sessions left out). The newest {MAX_LINES} stay on the page.</p>
    </section>
  )
}

function LogLine({ e }: { e: LogEntry }) {
  const t = new Date(e.timestamp)
  const today = t.toDateString() === new Date().toDateString()
  const shown = today
    ? t.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' })
    : t.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' })
  return (
    <div class={'logline sev-' + e.severity}>
      <time dateTime={e.timestamp} title={t.toLocaleString()}>
        {shown}
      </time>{' '}
      <span class="sev">{e.severity.toUpperCase()}</span> {e.sqlstate && e.sqlstate !== '00000' && <span class="sqlstate">{e.sqlstate} </span>}
      <span class="msg">{e.message}</span>
      {e.detail && <div class="log-extra">DETAIL: {e.detail}</div>}
      {e.hint && <div class="log-extra">HINT: {e.hint}</div>}
      {e.statement && <div class="log-extra">STATEMENT: {e.statement}</div>}
    </div>
  )
}

/** IndexAdvice shows the index suggestions and the unused and redundant indexes, each with its statement to copy. */
function IndexAdvice({ id, path }: { id: string; path: string }) {
  // The appliance keeps the advice a few minutes (computing it plans statements); Refresh asks anew.
  const fresh = useRef(false)
  const adv = useLoad(() => {
    const q = fresh.current ? '?refresh=true' : ''
    fresh.current = false
    return get<{ advisor: Advice | null }>(path + '/advisor/indexes' + q)
  }, [path])
  const hyg = useLoad(() => get<{ hygiene: Hygiene | null }>(path + '/advisor/index-hygiene'), [path])
  const a = adv.data?.advisor
  const h = hyg.data?.hygiene
  const suggestions = a?.suggestions ?? []
  const unused = h?.unused_indexes ?? []
  const redundant = h?.redundant_indexes ?? []
  return (
    <section class="card" aria-labelledby="advice-heading">
      <div class="card-head">
        <h2 id="advice-heading">Index advice</h2>
        <button
          onClick={() => {
            fresh.current = true
            adv.reload()
            hyg.reload()
          }}
        >
          Refresh
        </button>
      </div>
      <h3>Suggested indexes</h3>
      {a && a.available && a.computed_at && <p class="hint">Computed {when(a.computed_at)}; Refresh computes them again.</p>}
      <ErrorBox error={adv.error} />
      {adv.data && !a && <Empty>No advice available.</Empty>}
      {a && !a.available && (
        <div class="empty">
          <p>{a.reason || 'Index suggestions are not available for this database.'}</p>
          {a.missing_extensions && a.missing_extensions.length > 0 && (
            <p>
              Missing: {a.missing_extensions.map((x, i) => [i > 0 && ', ', <code>{x}</code>])}. Enable them on the{' '}
              <a href={'/projects/' + id + '/extensions'}>Extensions tab</a>.
            </p>
          )}
        </div>
      )}
      {a && a.available && suggestions.length === 0 && <Empty>No suggestions: no predicate filtered enough rows to be worth an index.</Empty>}
      {a && a.available && suggestions.length > 0 && (
        <>
          {(!a.cost_estimates_available || !a.size_estimates_available) && (
            <p class="hint">
              Without the hypopg extension the suggestions come without cost and size estimates: enable it on the{' '}
              <a href={'/projects/' + id + '/extensions'}>Extensions tab</a>.
            </p>
          )}
          <ul class="advice-list">
            {suggestions.map((s, i) => (
              <li>
                <CopyField label={`Suggested index ${i + 1} on ${s.table}`} value={s.ddl} />
                <p class="hint">
                  {a.cost_estimates_available ? `Estimated cost reduction ${s.estimated_cost_reduction_pct.toFixed(0)}%` : 'No cost estimate'}
                  {' · '}
                  {a.size_estimates_available ? `estimated size ${bytes(s.estimated_size_bytes)}` : 'no size estimate'}
                  {s.index_method && ` · ${s.index_method}`}
                </p>
              </li>
            ))}
          </ul>
        </>
      )}
      <h3>Index hygiene</h3>
      <ErrorBox error={hyg.error} />
      {hyg.data && !h && <Empty>No hygiene report available.</Empty>}
      {h && !h.available && (
        <div class="empty">
          <p>{h.reason || 'The index hygiene report is not available for this database.'}</p>
        </div>
      )}
      {h && h.available && (
        <>
          <dl class="facts">
            <dt>Reclaimable</dt>
            <dd>{bytes(h.reclaimable_bytes)}</dd>
            <dt>Scans counted since</dt>
            <dd>
              {h.stats_reset_at ? when(h.stats_reset_at) : '-'}
              {h.observation_window_seconds > 0 && <span class="hint"> ({duration(h.observation_window_seconds * 1000)})</span>}
            </dd>
          </dl>
          {h.reason && <p class="warning">{h.reason}</p>}
          {unused.length === 0 && redundant.length === 0 && <Empty>No unused or redundant indexes.</Empty>}
          {unused.length > 0 && (
            <>
              <h4>Unused indexes</h4>
              <ul class="advice-list">
                {unused.map((x) => (
                  <li>
                    <p>
                      <code>
                        {x.schema}.{x.index}
                      </code>{' '}
                      on {x.table}: {bytes(x.size_bytes)}, {x.index_scans} scans
                    </p>
                    <CopyField label={`Drop unused index ${x.schema}.${x.index}`} value={x.drop_statement} />
                  </li>
                ))}
              </ul>
            </>
          )}
          {redundant.length > 0 && (
            <>
              <h4>Redundant indexes</h4>
              <ul class="advice-list">
                {redundant.map((x) => (
                  <li>
                    <p>
                      <code>
                        {x.schema}.{x.index}
                      </code>{' '}
                      on {x.table}: {bytes(x.size_bytes)}, covered by <code>{x.covered_by}</code>
                    </p>
                    <CopyField label={`Drop redundant index ${x.schema}.${x.index}`} value={x.drop_statement} />
                  </li>
                ))}
              </ul>
            </>
          )}
        </>
      )}
    </section>
  )
}
