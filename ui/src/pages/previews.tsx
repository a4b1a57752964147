import { useState } from 'preact/hooks'
import { del, get, post, seg, type Connections, type Me, type Schemas } from '../api'
import { Badge, Empty, ErrorBox, Form, isOrgAdmin, SecretField, Table, useListAction, when } from '../ui'
import { useProjectLoad } from '../events'
import { DiffToggle, SchemaDiffView, sourceBody, SourceFields, sourceText, type Source } from './branches'

type Preview = Schemas['PreviewDatabase']
type Cutover = Schemas['CutoverRequest']

/** The project's preview databases as a tree under the project: create (empty, or the data as of now, a
 * past time or a restore point, with a TTL), connect, compare schemas, reset, extend, delete; and their
 * cutover requests (below), each with the schema changes an approval would bring. */
export function PreviewsTab({ id, path, active, me, projectName }: { id: string; path: string; active: boolean; me: Me; projectName: string }) {
  const list = useProjectLoad(id, () => get<{ preview_databases: Preview[] }>(path + '/preview-databases'), [path])
  const [name, setName] = useState('')
  const [source, setSource] = useState<Source>({ kind: 'clone', time: '', point: '' })
  const [ttl, setTTL] = useState(24)
  const [conns, setConns] = useState<{ id: string; c: Connections } | null>(null)
  const [error, act] = useListAction(list)
  const base = (p: Preview) => '/v1/preview-databases/' + seg(p.id)
  return (
    <>
      <section class="card">
        <h2>New preview</h2>
        <p class="hint">A preview is a database of its own (own server, URL and password) made from this project, deleted when its time is up.</p>
        <Form
          label="Create a preview"
          onSubmit={async () => {
            await post(path + '/preview-databases', { name: name || undefined, ttl_hours: ttl, ...sourceBody(source) })
            setName('')
            list.reload()
          }}
        >
          <div class="row">
            <div>
              <label for="preview-name">Name (optional)</label>
              <input id="preview-name" maxLength={63} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </div>
            <SourceFields path={path} value={source} onChange={setSource} />
            <div>
              <label for="preview-ttl">Hours to keep</label>
              <input id="preview-ttl" type="number" min={1} max={720} value={ttl} onInput={(e) => setTTL(Number((e.target as HTMLInputElement).value))} />
            </div>
            <button type="submit" class="primary" disabled={!active}>
              Create preview
            </button>
          </div>
        </Form>
      </section>
      <ErrorBox error={list.error || error} />
      {conns && (
        <section class="card notice">
          <h2>Connect to the preview</h2>
          <SecretField label="Preview direct connection" value={conns.c.direct_url} />
          <SecretField label="Preview pooled connection" value={conns.c.pooled_url} />
          <button onClick={() => setConns(null)}>Done</button>
        </section>
      )}
      {list.data && list.data.preview_databases.length === 0 && <Empty>No previews. Create one to try a change on a copy of the data.</Empty>}
      {list.data && list.data.preview_databases.length > 0 && (
        <Table cols={['Project and its previews', 'State', { label: 'Deleted at', sm: true }, { label: 'Actions', hidden: true }]}>
          <tr key="project" class="tree-root">
            <td colSpan={4}>
              <strong>{projectName}</strong> <span class="hint">the project · {list.data.preview_databases.length} preview{list.data.preview_databases.length === 1 ? '' : 's'}</span>
            </td>
          </tr>
          {list.data.preview_databases.map((p, i, all) => (
            <tr key={p.id} class="tree-child">
              <td>
                <div class="tree-cell">
                <span class="tree-branch" aria-hidden="true">
                  {i === all.length - 1 ? '└─' : '├─'}
                </span>
                <span class="tree-node">
                  {p.name}
                  <div class="hint">{sourceText(p)}</div>
                  {p.last_error && <div class="hint">{p.last_error}</div>}
                  {p.state === 'active' && <DiffToggle previewID={p.id} name={p.name} />}
                </span>
                </div>
              </td>
              <td>
                <Badge value={p.state} />
              </td>
              <td class="sm-hide">{when(p.ttl_expires_at)}</td>
              <td class="actions-cell">
                <div class="cell-actions">
                <button
                  disabled={p.state !== 'active'}
                  aria-label={'Connect to ' + p.name}
                  onClick={() => act(async () => setConns({ id: p.id, c: (await get<{ connections: Connections }>(base(p) + '/connections')).connections }))}
                >
                  Connect
                </button>
                <button aria-label={'Keep 24 h longer: ' + p.name} onClick={() => act(() => post(base(p) + '/extend', { ttl_hours: 24 }))}>
                  Keep 24{'\u00a0'}h
                </button>
                <button
                  disabled={p.state !== 'active'}
                  aria-label={'Reset ' + p.name}
                  onClick={() => confirm(`Reset ${p.name}? Its own changes are lost; it is made again from its source.`) && act(() => post(base(p) + '/reset'))}
                >
                  Reset
                </button>
                <button
                  disabled={p.state !== 'active'}
                  aria-label={'Request cutover of ' + p.name + ' into the project'}
                  onClick={() => act(() => post(path + '/cutover-requests', { preview_id: p.id }))}
                >
                  Request cutover
                </button>
                <button
                  aria-label={'Delete ' + p.name}
                  disabled={p.state === 'deleting'}
                  onClick={() => confirm(`Delete the preview ${p.name} and everything in it?`) && act(() => del(base(p)))}
                >
                  Delete
                </button>
                </div>
              </td>
            </tr>
          ))}
        </Table>
      )}
      <Cutovers id={id} path={path} previews={list.data?.preview_databases ?? []} admin={isOrgAdmin(me)} />
    </>
  )
}

/** The project's cutover requests: an admin approves (a backup, then the preview's data swapped in) or
 * rejects the open ones; the others show how they ended. */
function Cutovers({ id, path, previews, admin }: { id: string; path: string; previews: Preview[]; admin: boolean }) {
  const list = useProjectLoad(id, () => get<{ cutover_requests: Cutover[] }>(path + '/cutover-requests'), [path])
  const [error, act] = useListAction(list)
  const [rejecting, setRejecting] = useState('')
  const [reason, setReason] = useState('')
  // A preview a completed cutover deleted is not listed any more: the request kept its name.
  const name = (r: Cutover) => r.preview_name || previews.find((p) => p.id === r.preview_database_id)?.name || 'preview …' + r.preview_database_id.slice(-6)
  const base = (r: Cutover) => path + '/cutover-requests/' + seg(r.id)
  if (!list.data || list.data.cutover_requests.length === 0) return <ErrorBox error={list.error} />
  return (
    <section class="card">
      <h2>Cutover requests</h2>
      <p class="hint">
        A cutover makes a preview's data this project's data, behind the project's own URLs and password. An organization admin approves it;
        the project is backed up first, and that backup brings the old data back if needed.
      </p>
      <ErrorBox error={list.error || error} />
      <Table cols={['Preview', 'Status', { label: 'Requested', sm: true }, { label: 'Actions', hidden: true }]}>
        {list.data.cutover_requests.map((r) => (
          <tr key={r.id}>
            <td>
              {name(r)}
              {r.customer_note && <div class="hint">{r.customer_note}</div>}
              {r.rejected_reason && <div class="hint">Rejected: {r.rejected_reason}</div>}
              {r.last_error && <div class="hint">{r.last_error}</div>}
              {r.status === 'open' && r.schema_diff_url && <SchemaDiffView previewID={r.preview_database_id} name={name(r)} />}
              {r.pre_cutover_backup_id && (
                <div class="hint">
                  The project was backed up first (<a href={'/projects/' + id + '/backups'}>Backups</a>).
                </div>
              )}
            </td>
            <td>
              <Badge value={r.status} />
            </td>
            <td class="sm-hide">{when(r.created_at)}</td>
            <td class="actions-cell">
              <div class="cell-actions">
              {r.status === 'open' && admin && (
                <>
                  <button
                    class="primary"
                    aria-label={'Approve the cutover of ' + name(r)}
                    onClick={() =>
                      confirm(`Replace this project's data with ${name(r)}'s? The project is backed up first.`) &&
                      act(() => post(base(r) + '/approve'))
                    }
                  >
                    Approve
                  </button>
                  <button aria-label={'Reject the cutover of ' + name(r)} onClick={() => setRejecting(r.id)}>
                    Reject
                  </button>
                </>
              )}
              {rejecting === r.id && (
                <Form
                  label={'Reject the cutover of ' + name(r)}
                  onSubmit={async () => {
                    await post(base(r) + '/reject', { rejected_reason: reason })
                    setRejecting('')
                    setReason('')
                    list.reload()
                  }}
                >
                  <label for={'reject-' + r.id}>Reason for rejecting</label>
                  <input id={'reject-' + r.id} required maxLength={1000} value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
                  <button type="submit">Confirm rejection</button>
                </Form>
              )}
              {r.status === 'open' && !admin && <span class="hint">waits for an admin</span>}
              </div>
            </td>
          </tr>
        ))}
      </Table>
    </section>
  )
}
