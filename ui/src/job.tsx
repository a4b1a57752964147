import { get, seg, type Job } from './api'
import { Badge, ErrorBox, useLoad } from './ui'

const ended = (s: string) => s === 'completed' || s === 'failed' || s === 'cancelled'

/** JobProgress follows a job the page started until it ends, then shows how (with a failure's stderr). */
export function JobProgress({ id, label }: { id: string; label: string }) {
  const { data, error } = useLoad(() => get<{ job: Job }>('/v1/jobs/' + seg(id)), [id], 1000)
  const j = data?.job
  return (
    <div class="job-progress" role="status" aria-live="polite">
      <span>{label}: </span>
      {j ? <Badge value={j.state} /> : '…'}
      {j && !ended(j.state) && <span class="hint"> (job {j.id})</span>}
      <ErrorBox error={error} />
      {j?.state === 'failed' && (
        <div class="error">
          {j.error}
          {j.last_stderr && <pre>{j.last_stderr}</pre>}
        </div>
      )}
    </div>
  )
}
