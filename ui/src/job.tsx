import { useState } from 'preact/hooks'
import { get, seg, type Job } from './api'
import { useProjectEvents } from './events'
import { bytes } from './pages/overview'
import { Badge, ErrorBox, useLoad, when } from './ui'

const ended = (s: string) => s === 'completed' || s === 'failed' || s === 'cancelled'

/** JobProgress follows a job the page started until it ends, then shows how (with a failure's stderr). Its end
 * arrives live on the project's event stream (job.completed / job.failed carry the job); a slow poll is
 * only the fallback. */
export function JobProgress({ id, label }: { id: string; label: string }) {
  const { data, error } = useLoad(() => get<{ job: Job }>('/v1/jobs/' + seg(id)), [id], 15000)
  const [live, setLive] = useState<Job | null>(null)
  useProjectEvents(data?.job.project_id ?? '', (_type, ev) => {
    const job = (ev as { job?: Job } | null)?.job
    if (job && job.id === id) setLive(job)
  })
  const j = live ?? data?.job
  return (
    <div class="job-progress" role="status" aria-live="polite">
      <span>{label}: </span>
      {j ? <Badge value={j.state} /> : '…'}
      {j && !ended(j.state) && <span class="hint"> (job {j.id})</span>}
      <ErrorBox error={error} />
      {j?.state === 'completed' && <Result result={j.result} />}
      {j?.state === 'failed' && (
        <div class="error">
          {j.error}
          {j.last_stderr && <pre>{j.last_stderr}</pre>}
        </div>
      )}
    </div>
  )
}

/** label makes an API key ("tables_ready", "lag_bytes") a label a person reads ("Tables ready", "Lag"). */
export function label(key: string): string {
  const words = key.replace(/_(bytes|ms)$/, '').replace(/_/g, ' ').replace(/\bid\b/g, 'ID')
  return words.charAt(0).toUpperCase() + words.slice(1)
}

const isoTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/

/** readable shows a value of an API answer as a person reads it: times local, sizes and durations in
 * units, booleans as yes/no. key is its field name (its suffix says its unit). */
export function readable(key: string, v: unknown): string {
  if (typeof v === 'boolean') return v ? 'yes' : 'no'
  if (typeof v === 'number' && key.endsWith('_bytes')) return bytes(v)
  if (typeof v === 'number' && key.endsWith('_ms')) return v < 1000 ? `${v} ms` : `${(v / 1000).toFixed(1)} s`
  if (typeof v === 'number') return v.toLocaleString()
  if (typeof v === 'string' && isoTime.test(v)) return when(v)
  return String(v)
}

/** Result shows what a finished job reported, its plain fields (a follow's state, tables ready, lag …). */
function Result({ result }: { result: unknown }) {
  if (!result || typeof result !== 'object' || Array.isArray(result)) return null
  const plain = Object.entries(result as Record<string, unknown>).filter(([, v]) => v !== null && typeof v !== 'object')
  if (plain.length === 0) return null
  return (
    <dl class="facts job-result">
      {plain.map(([k, v]) => [<dt>{label(k)}</dt>, <dd>{readable(k, v)}</dd>])}
    </dl>
  )
}
