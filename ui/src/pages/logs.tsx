import { useState } from 'preact/hooks'
import { ApiError, get, type Schemas } from '../api'
import { Empty, ErrorBox, message } from '../ui'

// The logs explorer: a search of the server's log over a time range (the archived days too), with the
// severity, user, database and SQLSTATE filters, run by the API (GET .../logs); its matches downloaded
// whole as NDJSON (GET .../logs/download). A line with a statement opens it in the SQL studio, and a line of
// a statement links to that query in monitoring (by its query_id, else by its text).

type LogEntry = Schemas['Entry']

/** RANGES are the ranges offered; "custom" takes a from and a to. The widest need the log archive. */
const RANGES = [
  { id: '1', label: 'Last hour' },
  { id: '6', label: 'Last 6 hours' },
  { id: '24', label: 'Last 24 hours' },
  { id: '168', label: 'Last 7 days' },
  { id: '720', label: 'Last 30 days (log archive)' },
  { id: 'custom', label: 'Custom range' },
]

const SEVERITY_SETS = [
  { id: '', label: 'All severities' },
  { id: 'warning,error,fatal,panic', label: 'Warnings and errors' },
  { id: 'error,fatal,panic', label: 'Errors' },
  { id: 'log', label: 'log' },
  { id: 'notice', label: 'notice' },
  { id: 'info', label: 'info' },
  { id: 'debug', label: 'debug' },
]

const LIMITS = [50, 200, 500]

type Search = { q: string; range: string; from: string; to: string; severity: string; user: string; database: string; sqlstate: string; limit: number }

const blank: Search = { q: '', range: '1', from: '', to: '', severity: '', user: '', database: '', sqlstate: '', limit: 200 }

/** localInput formats a time for a datetime-local input (the browser's zone). */
function localInput(d: Date): string {
  const p = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`
}

/** params turns a search into the API's query parameters (the range as from/to, or hours). */
function params(s: Search): URLSearchParams {
  const q = new URLSearchParams()
  if (s.range === 'custom') {
    if (s.from) q.set('from', new Date(s.from).toISOString())
    if (s.to) q.set('to', new Date(s.to).toISOString())
  } else q.set('hours', s.range)
  for (const k of ['q', 'severity', 'user', 'database', 'sqlstate'] as const) {
    const v = s[k].trim()
    if (v) q.set(k, v)
  }
  return q
}

/** stamp is a log time in the reader's zone, to the millisecond. */
function stamp(iso: string): string {
  const t = new Date(iso)
  const p = (n: number, w = 2) => String(n).padStart(w, '0')
  return `${t.getFullYear()}-${p(t.getMonth() + 1)}-${p(t.getDate())} ${p(t.getHours())}:${p(t.getMinutes())}:${p(t.getSeconds())}.${p(t.getMilliseconds(), 3)}`
}

/** filename is the download's name from its Content-Disposition (the API's), else a default. */
function filename(res: Response): string {
  const m = /filename="?([^";]+)"?/.exec(res.headers.get('Content-Disposition') ?? '')
  return m ? m[1] : 'logs.ndjson'
}

export function LogsTab({ id, path }: { id: string; path: string }) {
  const [s, setS] = useState<Search>(blank)
  const [ran, setRan] = useState<Search | null>(null)
  const [entries, setEntries] = useState<LogEntry[] | null>(null)
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const [downloading, setDownloading] = useState(false)
  const set = (k: keyof Search) => (e: Event) => {
    const v = (e.target as HTMLInputElement).value
    setS({ ...s, [k]: k === 'limit' ? Number(v) : v })
  }
  const search = async (next: Search = s) => {
    setBusy(true)
    setError('')
    try {
      const q = params(next)
      q.set('limit', String(next.limit))
      const res = await get<{ logs: { entries: LogEntry[] } }>(path + '/logs?' + q.toString())
      setEntries(res.logs.entries.slice().reverse()) // newest first
      setRan(next)
    } catch (e) {
      setError(message(e))
    } finally {
      setBusy(false)
    }
  }
  /** narrow sets one filter from a line (its user, database or SQLSTATE) and searches again. */
  const narrow = (k: 'user' | 'database' | 'sqlstate', v: string) => {
    const next = { ...s, [k]: v }
    setS(next)
    search(next)
  }
  // The download goes through fetch: the session cookie counts only with the API's CSRF header, which a
  // plain link cannot send. The file is saved once whole (at most 100,000 lines).
  const download = async () => {
    setDownloading(true)
    setError('')
    try {
      const res = await fetch(path + '/logs/download?' + params(s).toString(), {
        headers: { 'X-Appliance-CSRF': '1' },
        credentials: 'same-origin',
      })
      if (!res.ok) {
        const body = await res.json().catch(() => ({}))
        throw new ApiError(res.status, body.error || `download: ${res.status}`)
      }
      const url = URL.createObjectURL(await res.blob())
      const a = document.createElement('a')
      a.href = url
      a.download = filename(res)
      document.body.appendChild(a)
      a.click()
      a.remove()
      setTimeout(() => URL.revokeObjectURL(url), 10000)
    } catch (e) {
      setError(message(e))
    } finally {
      setDownloading(false)
    }
  }
  const custom = s.range === 'custom'
  return (
    <section class="card" aria-labelledby="logx-heading">
      <div class="card-head">
        <h2 id="logx-heading">Logs explorer</h2>
        {entries && ran && (
          <span class="hint" role="status">
            {entries.length === ran.limit ? `the newest ${entries.length} matches` : `${entries.length} ${entries.length === 1 ? 'match' : 'matches'}`}
          </span>
        )}
      </div>
      <form
        class="logx-form"
        aria-label="Search the server's log"
        onSubmit={(e) => {
          e.preventDefault()
          search()
        }}
      >
        <div class="row">
          <div class="logx-q">
            <label for="logx-q">Text (in the message, detail, hint or statement; ignoring case)</label>
            <input id="logx-q" type="search" maxLength={200} value={s.q} onInput={set('q')} placeholder="e.g. does not exist" />
          </div>
          <div>
            <label for="logx-range">Time range</label>
            <select
              id="logx-range"
              value={s.range}
              onChange={(e) => {
                const range = (e.target as HTMLSelectElement).value
                const now = new Date()
                setS(range === 'custom' && !s.from ? { ...s, range, from: localInput(new Date(now.getTime() - 3600e3)), to: '' } : { ...s, range })
              }}
            >
              {RANGES.map((r) => (
                <option value={r.id}>{r.label}</option>
              ))}
            </select>
          </div>
        </div>
        {custom && (
          <div class="row">
            <div>
              <label for="logx-from">From (your local time)</label>
              <input id="logx-from" type="datetime-local" step={1} value={s.from} onInput={set('from')} required />
            </div>
            <div>
              <label for="logx-to">To (your local time; empty: now)</label>
              <input id="logx-to" type="datetime-local" step={1} value={s.to} onInput={set('to')} />
            </div>
          </div>
        )}
        <div class="row">
          <div>
            <label for="logx-severity">Severity</label>
            <select id="logx-severity" value={s.severity} onChange={set('severity')}>
              {SEVERITY_SETS.map((x) => (
                <option value={x.id}>{x.label}</option>
              ))}
            </select>
          </div>
          <div>
            <label for="logx-user">User</label>
            <input id="logx-user" maxLength={63} value={s.user} onInput={set('user')} autocomplete="off" />
          </div>
          <div>
            <label for="logx-database">Database</label>
            <input id="logx-database" maxLength={63} value={s.database} onInput={set('database')} autocomplete="off" />
          </div>
          <div>
            <label for="logx-sqlstate">SQLSTATE</label>
            <input id="logx-sqlstate" maxLength={5} pattern="[0-9A-Za-z]{5}" title="5 digits or letters, e.g. 42P01" value={s.sqlstate} onInput={set('sqlstate')} placeholder="e.g. 42P01" autocomplete="off" />
          </div>
          <div>
            <label for="logx-limit">Show</label>
            <select id="logx-limit" value={String(s.limit)} onChange={set('limit')}>
              {LIMITS.map((n) => (
                <option value={String(n)}>the newest {n}</option>
              ))}
            </select>
          </div>
        </div>
        <div class="actions">
          <button type="submit" class="primary" disabled={busy}>
            {busy ? 'Searching…' : 'Search'}
          </button>
          <button type="button" onClick={download} disabled={downloading}>
            {downloading ? 'Downloading…' : 'Download all matches (NDJSON)'}
          </button>
          <button
            type="button"
            class="link"
            onClick={() => {
              setS(blank)
              setEntries(null)
              setRan(null)
            }}
          >
            Reset
          </button>
        </div>
      </form>
      <ErrorBox error={error} />
      {entries && entries.length === 0 && <Empty>No log line matches this search.</Empty>}
      {entries && entries.length > 0 && (
        <ol class="logx-list" aria-label="Matching log lines, newest first">
          {entries.map((e) => (
            <ExplorerLine key={e.cursor} e={e} id={id} narrow={narrow} />
          ))}
        </ol>
      )}
      <p class="hint">
        Times are in your local time. The search runs on the server over the chosen range, the archived days included (30 days need the log
        archive: up --log-archive-days); the newest matches are shown, newest first. The download has every match of the range, oldest first, at
        most 100,000 lines. Passwords are masked and the appliance's own sessions left out.
      </p>
    </section>
  )
}

function ExplorerLine({ e, id, narrow }: { e: LogEntry; id: string; narrow: (k: 'user' | 'database' | 'sqlstate', v: string) => void }) {
  const state = e.sqlstate && e.sqlstate !== '00000' ? e.sqlstate : ''
  return (
    <li class={'logline logx-line sev-' + e.severity}>
      <div class="logx-meta">
        <time dateTime={e.timestamp} title={new Date(e.timestamp).toString()}>
          {stamp(e.timestamp)}
        </time>
        <span class="sev">{e.severity.toUpperCase()}</span>
        {state && (
          <button type="button" class="link sqlstate" title="Only this SQLSTATE" onClick={() => narrow('sqlstate', state)}>
            {state}
          </button>
        )}
        {e.user && (
          <button type="button" class="link" title="Only this user" onClick={() => narrow('user', e.user!)}>
            {e.user}
          </button>
        )}
        {e.database && (
          <>
            <span aria-hidden="true">@</span>
            <button type="button" class="link" title="Only this database" onClick={() => narrow('database', e.database!)}>
              {e.database}
            </button>
          </>
        )}
        {e.application_name && <span class="hint">{e.application_name}</span>}
      </div>
      <div class="msg">{e.message}</div>
      {e.detail && <div class="log-extra">DETAIL: {e.detail}</div>}
      {e.hint && <div class="log-extra">HINT: {e.hint}</div>}
      {(e.statement || e.query_id) && (
        <div class="log-extra">
          {e.statement && (
            <>
              STATEMENT: {e.statement}{' '}
              <a class="logx-open" href={'/projects/' + encodeURIComponent(id) + '/sql?sql=' + encodeURIComponent(e.statement)}>
                Open in SQL studio
              </a>
              {' · '}
            </>
          )}
          <a class="logx-open" href={'/projects/' + encodeURIComponent(id) + '/monitoring?' + (e.query_id ? 'query_id=' + encodeURIComponent(e.query_id) : 'statement=' + encodeURIComponent(e.statement!))}>
            Its query in monitoring
          </a>
          {e.query_id && <span class="hint"> · query id {e.query_id}</span>}
        </div>
      )}
    </li>
  )
}
