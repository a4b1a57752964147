import { useState } from 'preact/hooks'
import { del, get, post, seg, type Connections, type Schemas } from '../api'
import { Badge, CopyField, Empty, ErrorBox, Form, Table, useListAction, when } from '../ui'
import { useProjectLoad } from '../events'

type Preview = Schemas['PreviewDatabase']

/** The project's preview databases: create (clone or empty, with a TTL), connect, reset, extend, delete. */
export function PreviewsTab({ id, path, active }: { id: string; path: string; active: boolean }) {
  const list = useProjectLoad(id, () => get<{ preview_databases: Preview[] }>(path + '/preview-databases'), [path])
  const [name, setName] = useState('')
  const [mode, setMode] = useState('clone')
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
            await post(path + '/preview-databases', { name: name || undefined, mode, ttl_hours: ttl })
            setName('')
            list.reload()
          }}
        >
          <div class="row">
            <div>
              <label for="preview-name">Name (optional)</label>
              <input id="preview-name" maxLength={63} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="preview-mode">Contents</label>
              <select id="preview-mode" value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value)}>
                <option value="clone">the project's data as of now</option>
                <option value="empty">empty (same names)</option>
              </select>
            </div>
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
          <CopyField label="Preview direct connection" value={conns.c.direct_url} secret />
          <CopyField label="Preview pooled connection" value={conns.c.pooled_url} secret />
          <button onClick={() => setConns(null)}>Done</button>
        </section>
      )}
      {list.data && list.data.preview_databases.length === 0 && <Empty>No previews. Create one to try a change on a copy of the data.</Empty>}
      {list.data && list.data.preview_databases.length > 0 && (
        <Table cols={['Preview', 'State', { label: 'Deleted at', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.preview_databases.map((p) => (
            <tr key={p.id}>
              <td>
                {p.name}
                <div class="hint">{p.mode === 'clone' ? 'data as of ' + when(p.source_restore_time ?? '') : 'empty'}</div>
                {p.last_error && <div class="hint">{p.last_error}</div>}
              </td>
              <td>
                <Badge value={p.state} />
              </td>
              <td class="sm-hide">{when(p.ttl_expires_at)}</td>
              <td class="actions-cell">
                <button
                  disabled={p.state !== 'active'}
                  aria-label={'Connect to ' + p.name}
                  onClick={() => act(async () => setConns({ id: p.id, c: (await get<{ connections: Connections }>(base(p) + '/connections')).connections }))}
                >
                  Connect
                </button>
                <button aria-label={'Keep 24 h longer: ' + p.name} onClick={() => act(() => post(base(p) + '/extend', { ttl_hours: 24 }))}>
                  Keep 24 h
                </button>
                <button
                  disabled={p.state !== 'active'}
                  aria-label={'Reset ' + p.name}
                  onClick={() => confirm(`Reset ${p.name}? Its own changes are lost; it is made again from its source.`) && act(() => post(base(p) + '/reset'))}
                >
                  Reset
                </button>
                <button
                  aria-label={'Delete ' + p.name}
                  disabled={p.state === 'deleting'}
                  onClick={() => confirm(`Delete the preview ${p.name} and everything in it?`) && act(() => del(base(p)))}
                >
                  Delete
                </button>
              </td>
            </tr>
          ))}
        </Table>
      )}
    </>
  )
}
