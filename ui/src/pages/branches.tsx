import { useState } from 'preact/hooks'
import { get, seg, type Schemas } from '../api'
import { ErrorBox, useLoad, when } from '../ui'

type Preview = Schemas['PreviewDatabase']
type RestorePoint = Schemas['RestorePoint']
type SchemaDiff = Schemas['SchemaDiff']

/** sourceText says what a preview was made from: nothing, the project as of now, a past time or a restore point. */
export function sourceText(p: Preview): string {
  if (p.mode === 'empty') return 'empty (same names, no data)'
  const at = when(p.source_restore_time ?? '')
  if (p.source_restore_point_id) return `as of restore point “${p.source_restore_point_label}” (${at})`
  if (p.source_kind === 'backup') return 'as of ' + at + ' (point in time)'
  return 'copy of the data as it was at ' + at
}

/** The choice of a new preview's source. */
export type Source = { kind: 'clone' | 'time' | 'point' | 'empty'; time: string; point: string }

/** sourceBody is the create request's fields for a source. */
export function sourceBody(s: Source): Record<string, string> {
  switch (s.kind) {
    case 'empty':
      return { mode: 'empty' }
    case 'time':
      if (!s.time) throw new Error('choose the time the preview is to be as of')
      return { mode: 'clone', source_restore_time: new Date(s.time).toISOString() }
    case 'point':
      if (!s.point) throw new Error('choose a restore point')
      return { mode: 'clone', source_restore_point_id: s.point }
    default:
      return { mode: 'clone' }
  }
}

/** SourceFields chooses a new preview's source: empty, the data now, a past time within the project's
 * point-in-time window, or one of its restore points. */
export function SourceFields({ path, value, onChange }: { path: string; value: Source; onChange: (s: Source) => void }) {
  const points = useLoad(() => get<{ restore_points: RestorePoint[]; pitr_window_days: number }>(path + '/restore-points'), [path])
  const local = (d: Date) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16)
  const days = points.data?.pitr_window_days ?? 0
  const usable = points.data?.restore_points.filter((rp) => rp.backup_id) ?? []
  return (
    <>
      <div>
        <label for="preview-mode">Contents</label>
        <select id="preview-mode" value={value.kind} onChange={(e) => onChange({ ...value, kind: (e.target as HTMLSelectElement).value as Source['kind'] })}>
          <option value="clone">the project's data as of now</option>
          <option value="time">the project's data as of a past time</option>
          <option value="point">the project's data at a restore point</option>
          <option value="empty">empty (same names)</option>
        </select>
      </div>
      {value.kind === 'time' && (
        <div>
          <label for="preview-time">As of (your local time)</label>
          <input
            id="preview-time"
            type="datetime-local"
            required
            min={local(new Date(Date.now() - days * 86400000))}
            max={local(new Date())}
            value={value.time}
            onInput={(e) => onChange({ ...value, time: (e.target as HTMLInputElement).value })}
          />
          <div class="hint">{points.data && (points.data.restore_points.length || days ? `Back to the oldest backup (${days} day(s)).` : 'Within the point-in-time window: from the oldest backup on.')}</div>
        </div>
      )}
      {value.kind === 'point' && (
        <div>
          <label for="preview-point">Restore point</label>
          <select id="preview-point" required value={value.point} onChange={(e) => onChange({ ...value, point: (e.target as HTMLSelectElement).value })}>
            <option value="">choose…</option>
            {usable.map((rp) => (
              <option value={rp.id}>
                {rp.label} ({when(rp.pitr_time)})
              </option>
            ))}
          </select>
          {points.data && usable.length === 0 && <div class="hint">No restore points yet: make one on the Backups tab.</div>}
        </div>
      )}
      <ErrorBox error={points.error} />
    </>
  )
}

const changeWord: Record<string, string> = { added: 'added in the preview', removed: 'removed in the preview', changed: 'changed' }

/** SchemaDiffView shows what a preview's schema adds, removes and changes against its project's (read from
 * both servers' catalogs when shown). */
export function SchemaDiffView({ previewID, name }: { previewID: string; name: string }) {
  const diff = useLoad(() => get<SchemaDiff>('/v1/preview-databases/' + seg(previewID) + '/schema-diff'), [previewID])
  if (diff.error) return <ErrorBox error={diff.error} />
  if (!diff.data) return <p class="loading">Comparing the schemas…</p>
  const d = diff.data
  return (
    <div class="schema-diff" role="region" aria-label={'Schema changes of ' + name}>
      <p class="hint">
        {d.total === 0
          ? `No schema changes: ${name} has the project's tables, columns, indexes, constraints, views, functions, extensions, types, sequences, triggers, policies and grants.`
          : `${d.total} schema change${d.total === 1 ? '' : 's'} against the project${d.truncated ? ` (the first ${d.changes.length} shown)` : ''}:`}
      </p>
      {d.changes.length > 0 && (
        <ul class="diff-list">
          {d.changes.map((c) => (
            <li class={'diff-' + c.change}>
              <span class="diff-sign" aria-hidden="true">
                {c.change === 'added' ? '+' : c.change === 'removed' ? '−' : '~'}
              </span>{' '}
              <strong>{c.kind}</strong> <code>{(c.schema && c.kind !== 'grant' ? c.schema + '.' : '') + c.name}</code> <span class="hint">{changeWord[c.change]}</span>
              {c.change === 'changed' ? (
                <div class="diff-defs">
                  <code class="diff-before">{c.before}</code> → <code class="diff-after">{c.after}</code>
                </div>
              ) : (
                c.kind !== 'table' && c.kind !== 'view' && c.kind !== 'function' && (
                  <div class="diff-defs">
                    <code>{c.after || c.before}</code>
                  </div>
                )
              )}
            </li>
          ))}
        </ul>
      )}
    </div>
  )
}

/** DiffToggle shows a preview's schema diff on demand. */
export function DiffToggle({ previewID, name, open = false }: { previewID: string; name: string; open?: boolean }) {
  const [shown, setShown] = useState(open)
  return (
    <div>
      <button class="linkish" aria-expanded={shown} aria-label={(shown ? 'Hide' : 'Show') + ' schema changes of ' + name} onClick={() => setShown(!shown)}>
        {shown ? 'Hide schema changes' : 'Show schema changes'}
      </button>
      {shown && <SchemaDiffView previewID={previewID} name={name} />}
    </div>
  )
}
