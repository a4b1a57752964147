import { useState } from 'preact/hooks'
import { del, get, post, seg, type Me, type Project, type Schemas } from '../api'
import { Empty, ErrorBox, Form, SecretField, Table, useAction, useLoad, when } from '../ui'

type APIKey = Schemas['APIKey']

const allScopes = ['projects:read', 'projects:write', 'credentials:read', 'backups:read', 'backups:write', 'jobs:read',
  'organizations:read', 'organizations:write', 'api_keys:read', 'api_keys:write']
const projectScopes = allScopes.slice(0, 6)

export function APIKeys({ me }: { me: Me }) {
  const base = '/v1/organizations/' + seg(me.organization!.id) + '/api-keys'
  const keys = useLoad(() => get<{ api_keys: APIKey[] }>(base), [base])
  const projects = useLoad(() => get<{ projects: Project[] }>('/v1/projects'), [])
  const [name, setName] = useState('')
  const [project, setProject] = useState('')
  const [days, setDays] = useState('90')
  const [scopes, setScopes] = useState<string[]>(['projects:read'])
  const [created, setCreated] = useState<{ name: string; key: string } | null>(null)
  const [revokeError, act] = useAction()
  const offered = project ? projectScopes : allScopes
  const mayWrite = me.principal.scopes.includes('api_keys:write')
  return (
    <main>
      <h1>API keys</h1>
      {created && (
        <section class="card notice" aria-live="polite">
          <h2>Key “{created.name}” created</h2>
          <p>This is the only time the key is shown: copy it now into a secret manager.</p>
          <SecretField label="New API key" value={created.key} />
          <button onClick={() => setCreated(null)}>Done</button>
        </section>
      )}
      {mayWrite && (
        <section class="card">
          <h2>New key</h2>
          <Form
            label="Create an API key"
            onSubmit={async () => {
              const body: Record<string, unknown> = { name, scopes: scopes.filter((s) => offered.includes(s)) }
              if (project) body.project_id = project
              if (Number(days) > 0) body.expires_in_days = Number(days)
              const res = await post<{ plaintext_api_key: string }>(base, body)
              setCreated({ name, key: res.plaintext_api_key })
              setName('')
              keys.reload()
            }}
          >
            <div class="row">
              <div>
                <label for="key-name">Name</label>
                <input id="key-name" required maxLength={100} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
              </div>
              <div>
                <label for="key-project">Restricted to project</label>
                <select id="key-project" value={project} onChange={(e) => setProject((e.target as HTMLSelectElement).value)}>
                  <option value="">any project (organization-wide)</option>
                  {projects.data?.projects.map((p) => (
                    <option value={p.id}>{p.name}</option>
                  ))}
                </select>
              </div>
              <div>
                <label for="key-days">Expires in days (0: never)</label>
                <input id="key-days" type="number" min={0} max={3650} value={days} onInput={(e) => setDays((e.target as HTMLInputElement).value)} />
              </div>
            </div>
            <fieldset class="scopes">
              <legend>Scopes</legend>
              {offered.map((s) => (
                <label class="check">
                  <input
                    type="checkbox"
                    checked={scopes.includes(s)}
                    onChange={(e) => setScopes((e.target as HTMLInputElement).checked ? [...scopes, s] : scopes.filter((x) => x !== s))}
                  />
                  {s}
                </label>
              ))}
            </fieldset>
            <button type="submit" class="primary">
              Create key
            </button>
          </Form>
        </section>
      )}
      <ErrorBox error={keys.error || revokeError} />
      {keys.data && keys.data.api_keys.length === 0 && <Empty>No API keys: create one above for CI or scripts.</Empty>}
      {keys.data && keys.data.api_keys.length > 0 && (
        <Table cols={['Name', { label: 'Prefix', sm: true }, { label: 'Scopes', sm: true }, 'Status', { label: 'Last used', sm: true }, { label: 'Actions', hidden: true }]}>
            {keys.data.api_keys.map((k) => (
              <tr key={k.id}>
                <td>
                  {k.name}
                  {k.project_id && <div class="hint">project {projects.data?.projects.find((p) => p.id === k.project_id)?.name ?? k.project_id}</div>}
                </td>
                <td class="sm-hide">
                  <code>{k.key_prefix}…</code>
                </td>
                <td class="sm-hide">{k.scopes.length === allScopes.length ? 'all' : k.scopes.join(', ')}</td>
                <td>{k.revoked_at ? 'revoked' : k.is_active ? 'active' : 'expired'}</td>
                <td class="sm-hide">{k.last_used_at ? when(k.last_used_at) : 'never'}</td>
                <td>
                  {mayWrite && !k.revoked_at && (
                    <button
                      aria-label={'Revoke ' + k.name}
                      onClick={() =>
                        confirm(`Revoke the key “${k.name}”? Whatever uses it stops working at once.`) &&
                        act(async () => {
                          await del(base + '/' + seg(k.id))
                          keys.reload()
                        })
                      }
                    >
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
        </Table>
      )}
    </main>
  )
}
