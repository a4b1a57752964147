import { useState } from 'preact/hooks'
import { api, get, post, type Job, type Me, type Schemas } from '../api'
import { JobProgress } from '../job'
import { AdminOnly, Badge, ErrorBox, Form, isOrgAdmin, message, useLoad } from '../ui'
import { bytes } from './overview'

type Check = Schemas['PreflightCheck']
type Preflight = Schemas['Preflight']

const mark: Record<string, string> = { pass: '✓', warn: '!', fail: '✗' }

/** Checklist shows a preflight as a readable list: what passed, what to look at, what blocks. */
export function Checklist({ pf }: { pf: Preflight }) {
  return (
    <div class="checklist">
      <p class={pf.ok ? 'ok-banner' : 'error'}>{pf.ok ? 'Ready: no check failed.' : 'Not ready: fix the failing checks first.'}</p>
      <ul>
        {pf.checks.map((c) => (
          <li class={'check-' + c.status}>
            <span class="check-mark" aria-label={c.status}>
              {mark[c.status] ?? '?'}
            </span>
            <strong>{c.name}</strong> <span>{c.detail}</span>
          </li>
        ))}
      </ul>
    </div>
  )
}

/** put sends a file to a signed upload URL, reporting progress (fetch cannot report an upload's). */
function put(url: string, file: File, progress: (f: number) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest()
    x.open('PUT', url)
    x.upload.onprogress = (e) => e.lengthComputable && progress(e.loaded / e.total)
    x.onload = () => {
      if (x.status >= 200 && x.status < 300) return resolve()
      let msg = `upload failed (${x.status})`
      try {
        msg = JSON.parse(x.responseText).error || msg
      } catch {}
      reject(new Error(msg))
    }
    x.onerror = () => reject(new Error('the upload was interrupted'))
    x.send(file)
  })
}

export function ImportsTab({ path, projectName, me }: { path: string; projectName: string; me: Me }) {
  return (
    <AdminOnly me={me} what="import into the project">
      <Imports path={path} projectName={projectName} />
    </AdminOnly>
  )
}

function Imports({ path, projectName }: { path: string; projectName: string }) {
  const [file, setFile] = useState<File | null>(null)
  const [progress, setProgress] = useState(-1)
  const [uploadID, setUploadID] = useState('')
  const [confirmName, setConfirmName] = useState('')
  const [job, setJob] = useState<{ id: string; label: string } | null>(null)
  const [source, setSource] = useState('')
  const [pf, setPf] = useState<Preflight | null>(null)
  const [followJob, setFollowJob] = useState<{ id: string; label: string } | null>(null)
  const [error, setError] = useState('')
  const startJob = async (label: string, p: Promise<{ job: Job }>, set: typeof setJob) => {
    setError('')
    try {
      set({ id: (await p).job.id, label })
    } catch (e) {
      setError(message(e))
    }
  }
  return (
    <>
      <section class="card">
        <h2>Import a dump</h2>
        <p class="hint">A pg_dump custom-format file (pg_dump -Fc), restored over the database. Up to the project's storage limit.</p>
        <Form
          label="Upload a dump"
          onSubmit={async () => {
            if (!file) throw new Error('choose a file')
            const res = await post<{ upload: { id: string; upload_url: string } }>(path + '/imports/uploads')
            setProgress(0)
            await put(res.upload.upload_url, file, setProgress)
            setUploadID(res.upload.id)
          }}
        >
          <label for="dump-file">Dump file</label>
          <input id="dump-file" type="file" required onChange={(e) => setFile((e.target as HTMLInputElement).files?.[0] ?? null)} />
          {file && <p class="hint">{bytes(file.size)}</p>}
          {progress >= 0 && <progress max={1} value={progress} aria-label="Upload progress" />}
          <button type="submit" class="primary spaced">
            Upload
          </button>
        </Form>
        {uploadID && (
          <Form
            label="Restore the uploaded dump"
            onSubmit={async () => {
              if (confirmName !== projectName) throw new Error('type the project name to confirm')
              await startJob('Import', post(path + '/imports', { confirm: true, upload_id: uploadID }), setJob)
            }}
          >
            <p class="warning">The import replaces the objects of {projectName}'s database with the dump's.</p>
            <label for="import-confirm">Type the project name, {projectName}, to confirm</label>
            <input id="import-confirm" required value={confirmName} onInput={(e) => setConfirmName((e.target as HTMLInputElement).value)} />
            <button type="submit" class="danger spaced">
              Import
            </button>
          </Form>
        )}
        {job && <JobProgress id={job.id} label={job.label} />}
      </section>
      <section class="card">
        <h2>Move a live database in</h2>
        <p class="hint">Check a source, then follow it by logical replication and cut over when it has caught up.</p>
        <Form
          label="Check a source"
          onSubmit={async () => {
            setPf((await post<{ preflight: Preflight }>(path + '/imports/preflight', { source_url: source })).preflight)
          }}
        >
          <label for="source-url">Source URL (postgres://user:password@host:5432/db)</label>
          <input id="source-url" type="password" autoComplete="off" required value={source} onInput={(e) => setSource((e.target as HTMLInputElement).value)} />
          <button type="submit" class="primary spaced">
            Check
          </button>
        </Form>
        {pf && <Checklist pf={pf} />}
        {pf?.ok && (
          <div class="actions">
            <button class="primary" onClick={() => startJob('Follow', post(path + '/imports/follow', { source_url: source, confirm: true }), setFollowJob)}>
              Start following
            </button>
          </div>
        )}
        <div class="actions">
          <button onClick={() => startJob('Follow status', post(path + '/imports/follow/status'), setFollowJob)}>Follow status</button>
          <button
            onClick={() =>
              confirm(`Cut over now? ${projectName} stops following the source and takes writes itself; point your application at it.`) &&
              startJob('Cutover', post(path + '/imports/follow/cutover', { confirm: true }), setFollowJob)
            }
          >
            Cut over
          </button>
          <button
            onClick={() =>
              confirm(`Abort the follow? ${projectName} stops following the source; what it copied so far stays.`) &&
              startJob('Abort', post(path + '/imports/follow/abort'), setFollowJob)
            }
          >
            Abort
          </button>
        </div>
        {followJob && <JobProgress id={followJob.id} label={followJob.label} />}
        <ErrorBox error={error} />
      </section>
    </>
  )
}

type Schedule = Schemas['ScheduledBackup']

/** ScheduleCard shows and sets the daily backup. Its form appears only once the schedule is read: while it
 * loads or after an error there is nothing to show as saved, and nothing to save over the real schedule. A
 * project with no schedule yet gets a proposal (03:00 UTC, 7 days) marked as not set. */
export function ScheduleCard({ path, me }: { path: string; me: Me }) {
  const cur = useLoad(() => get<{ scheduled_backups: Schedule[] }>(path + '/scheduled-backups'), [path])
  const [saved, setSaved] = useState('')
  return (
    <section class="card">
      <h2>Daily backup</h2>
      <ErrorBox error={cur.error ? 'The schedule could not be read: ' + cur.error : ''} />
      {saved && <p role="status">{saved}</p>}
      {!cur.data && !cur.error && <p class="loading">Reading the schedule…</p>}
      {cur.data && (
        <ScheduleForm
          key={JSON.stringify(cur.data.scheduled_backups[0] ?? null)}
          path={path}
          s={cur.data.scheduled_backups[0]}
          admin={isOrgAdmin(me)}
          saved={() => {
            setSaved('Schedule saved.')
            cur.reload()
          }}
        />
      )}
    </section>
  )
}

/** ScheduleForm edits a schedule that was read (s; undefined: none is set). */
function ScheduleForm({ path, s, admin, saved }: { path: string; s: Schedule | undefined; admin: boolean; saved: () => void }) {
  const [hour, setHour] = useState(String(s?.cron_hour ?? 3))
  const [minute, setMinute] = useState(String(s?.cron_minute ?? 0))
  const [days, setDays] = useState(String(s?.retention_days ?? 7))
  const [active, setActive] = useState(s?.is_active ?? true)
  return (
    <>
      <Form
        label="Backup schedule"
        onSubmit={async () => {
          await api('PUT', path + '/scheduled-backups/default', {
            cron_hour: Number(hour),
            cron_minute: Number(minute),
            retention_days: Number(days),
            is_active: active,
          })
          saved()
        }}
      >
        <fieldset disabled={!admin}>
          <div class="row">
            <div>
              <label for="sched-hour">Hour (UTC)</label>
              <input id="sched-hour" type="number" min={0} max={23} value={hour} onInput={(e) => setHour((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="sched-minute">Minute</label>
              <input id="sched-minute" type="number" min={0} max={59} value={minute} onInput={(e) => setMinute((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="sched-days">Keep backups (days)</label>
              <input id="sched-days" type="number" min={1} max={365} value={days} onInput={(e) => setDays((e.target as HTMLInputElement).value)} />
            </div>
            <label class="check">
              <input type="checkbox" checked={active} onChange={(e) => setActive((e.target as HTMLInputElement).checked)} /> active
            </label>
            {admin && (
              <button type="submit" class="primary">
                Save schedule
              </button>
            )}
          </div>
        </fieldset>
      </Form>
      {!admin && <p class="hint admin-only">Only an owner or an admin of the organization can change the schedule.</p>}
      {s && <p class="hint">Last run: {s.last_run_at ? new Date(s.last_run_at).toLocaleString() : 'not yet'}</p>}
      <Badge value={s ? (s.is_active ? 'active' : 'paused') : 'not set'} />
      {!s && <span class="hint"> No daily backup yet: the values above are a proposal until set.</span>}
    </>
  )
}
