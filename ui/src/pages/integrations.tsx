import { useState } from 'preact/hooks'
import { del, get, post, put, seg, type Schemas } from '../api'
import { useProjectLoad } from '../events'
import { Badge, CopyField, Empty, ErrorBox, Form, useListAction, when } from '../ui'

type Integration = Schemas['Integration']

/** A connect form's field; a config field goes into the body's config (configOf), not the credentials. */
type Field = { name: string; label: string; secret?: boolean; optional?: boolean; config?: boolean }

/** The providers, their connect forms and what each does (docs/api-decisions.md "Integrations"). */
const providers: {
  id: string
  title: string
  does: string
  fields: Field[]
  viaPut?: boolean
  oauth?: boolean
  webhooks?: boolean
  /** configOf is the provider's config from the form's config fields (undefined: the defaults). */
  configOf?: (v: Record<string, string>) => Record<string, unknown> | undefined
}[] = [
  {
    id: 'deploy_a',
    title: 'deploy_a · Vercel-style hosting',
    does: 'Sets DATABASE_URL (pooled), DIRECT_URL and the CA on the platform project; each git branch deployed gets a preview database of its own.',
    fields: [
      { name: 'deploy_a_project_id', label: 'Platform project ID or name' },
      { name: 'token', label: 'API token', secret: true, optional: true },
      { name: 'team_id', label: 'Team ID', optional: true },
      { name: 'webhook_secret', label: 'Webhook signing secret', secret: true, optional: true },
    ],
    oauth: true,
    webhooks: true,
  },
  {
    id: 'deploy_b',
    title: 'deploy_b · Netlify-style hosting',
    does: 'Sets the connection variables on the site, per deploy context.',
    fields: [
      { name: 'site_id', label: 'Site ID' },
      { name: 'token', label: 'API token', secret: true },
      { name: 'webhook_secret', label: 'Deploy notification secret', secret: true, optional: true },
    ],
    webhooks: true,
  },
  {
    id: 'edge_c',
    title: 'edge_c · Cloudflare-style edge',
    does:
      'Gives the edge platform the connection: a Hyperdrive configuration of the direct connection (Hyperdrive dials it from the internet: the appliance needs a public host name), or, when a Worker script is named, DATABASE_URL and DIRECT_URL as that script\'s secrets.',
    fields: [
      { name: 'account_id', label: 'Account ID' },
      { name: 'api_token', label: 'API token', secret: true },
      { name: 'script', label: 'Worker script (its secrets instead of Hyperdrive)', optional: true, config: true },
    ],
    configOf: (v) => (v.script ? { mode: 'worker_secret', script: v.script } : undefined),
  },
  {
    id: 'auth_a',
    title: 'auth_a · Clerk-style identity',
    does: 'Copies the users into the auth_sync.users table of the database and keeps it up to date.',
    fields: [
      { name: 'secret_key', label: 'Secret key', secret: true },
      { name: 'webhook_secret', label: 'Webhook signing secret', secret: true, optional: true },
    ],
    webhooks: true,
  },
  {
    id: 'auth_b',
    title: 'auth_b · Auth0-style identity',
    does: 'Copies the users into the auth_sync.users table of the database and keeps it up to date.',
    fields: [
      { name: 'external_id', label: 'Tenant domain' },
      { name: 'client_id', label: 'Machine-to-machine client ID (read:users)', optional: true },
      { name: 'client_secret', label: 'Client secret', secret: true, optional: true },
      { name: 'token', label: 'Or a Management API token', secret: true, optional: true },
      { name: 'webhook_secret', label: 'Log stream bearer token', secret: true, optional: true },
    ],
    viaPut: true,
    webhooks: true,
  },
  {
    id: 'auth_c',
    title: 'auth_c · WorkOS-style directory',
    does: 'Copies the directory users into the auth_sync.users table of the database and keeps it up to date.',
    fields: [
      { name: 'external_id', label: 'Directory ID' },
      { name: 'token', label: 'API key', secret: true },
      { name: 'webhook_secret', label: 'Webhook secret', secret: true, optional: true },
    ],
    viaPut: true,
    webhooks: true,
  },
]

const titleOf = (id: string) => providers.find((p) => p.id === id)?.title ?? id

/** stateLabel is what a person reads for an integration's state. */
const stateLabel = (s: string) => ({ pending: 'Connecting', active: 'Connected', error: 'Error', disconnecting: 'Disconnecting' })[s] ?? s

/** The project's Integrations tab: what is connected (state, last sync, the variables pushed, the branches'
 * previews, the webhook URL to give the provider), disconnect with confirmation, and the connect forms. */
export function IntegrationsTab({ id, path }: { id: string; path: string }) {
  const base = path + '/integrations'
  const list = useProjectLoad(id, () => get<{ integrations: Integration[] }>(base), [base])
  const [error, act] = useListAction(list)
  const [chosen, setChosen] = useState('deploy_a')
  const [values, setValues] = useState<Record<string, string>>({})
  const connected = new URLSearchParams(location.search).get('connected')
  const prov = providers.find((p) => p.id === chosen)!
  const items = list.data?.integrations ?? []
  return (
    <>
      {connected && (
        <p class="notice" role="status">
          {titleOf(connected)} authorized the appliance: name its project below to finish connecting.
        </p>
      )}
      <ErrorBox error={list.error || error} />
      <section class="card">
        <h2>Integrations</h2>
        {list.data && items.length === 0 && (
          <Empty>No integrations. Connect a hosting platform to give it the connection string, or an identity provider to sync its users into a table.</Empty>
        )}
        {items.map((i) => (
          <article class="integration" key={i.id} aria-label={'Integration ' + i.provider}>
            <h3>{titleOf(i.provider)}</h3>
            <dl class="facts">
              <dt>State</dt>
              <dd>
                <Badge value={i.state} label={stateLabel(i.state)} />
              </dd>
              {i.external_id && (
                <>
                  <dt>Bound to</dt>
                  <dd>
                    <code>{i.external_id}</code>
                  </dd>
                </>
              )}
              <dt>Credentials</dt>
              <dd>{i.has_credentials ? 'stored (sealed, never shown)' : 'none'}</dd>
              <dt>Last sync</dt>
              <dd>{i.last_sync_at ? when(i.last_sync_at) : 'never'}</dd>
              <dt>Variables pushed</dt>
              <dd>{i.pushed.length ? i.pushed.map((v) => <code key={v}>{v} </code>) : 'none yet'}</dd>
              {i.previews.length > 0 && (
                <>
                  <dt>Branch previews</dt>
                  <dd>
                    {i.previews.map((p) => (
                      <div key={p.branch}>
                        <code>{p.branch}</code>
                        {p.preview_id && (
                          <>
                            {' '}
                            → <a href={'/projects/' + seg(id) + '/previews'}>{p.preview_id}</a>
                          </>
                        )}
                        {p.error && <span class="warning"> {p.error}</span>}
                      </div>
                    ))}
                  </dd>
                </>
              )}
            </dl>
            {i.last_error && (
              <div class="error" role="alert">
                {i.last_error}
              </div>
            )}
            {providers.find((p) => p.id === i.provider)?.webhooks && (
              <CopyField label="Webhook URL to give the provider" value={location.origin + '/v1/integrations/' + i.provider + '/webhook/' + id} />
            )}
            <button
              class="spaced"
              disabled={i.state === 'disconnecting'}
              onClick={() =>
                confirm(`Disconnect ${i.provider}? The variables it set at the provider are removed and its credentials are deleted.`) &&
                act(() => del(base + '/' + seg(i.provider)))
              }
            >
              Disconnect {i.provider}
            </button>
          </article>
        ))}
      </section>
      <section class="card">
        <h2>Connect a provider</h2>
        <label for="int-provider">Provider</label>
        <select
          id="int-provider"
          value={chosen}
          onChange={(e) => {
            setChosen((e.target as HTMLSelectElement).value)
            setValues({})
          }}
        >
          {providers.map((p) => (
            <option value={p.id} key={p.id}>
              {p.title}
            </option>
          ))}
        </select>
        <p class="hint">{prov.does}</p>
        <Form
          label={'Connect ' + prov.id}
          onSubmit={async () => {
            const v: Record<string, string> = {}
            for (const f of prov.fields) if (!f.config && values[f.name]) v[f.name] = values[f.name]
            const config = prov.configOf?.(values)
            if (prov.viaPut) {
              await put(base + '/' + prov.id, { credentials: v, ...(config ? { config } : {}) })
            } else {
              await post(base + '/' + prov.id + '/connect', { ...v, ...(config ? { config } : {}) })
            }
            setValues({})
            list.reload()
          }}
        >
          {prov.fields.map((f) => (
            <div key={prov.id + f.name}>
              <label for={'int-' + f.name}>
                {f.label}
                {f.optional ? ' (optional)' : ''}
              </label>
              <input
                id={'int-' + f.name}
                type={f.secret ? 'password' : 'text'}
                autocomplete="off"
                required={!f.optional}
                value={values[f.name] ?? ''}
                onInput={(e) => setValues({ ...values, [f.name]: (e.target as HTMLInputElement).value })}
              />
            </div>
          ))}
          <div class="actions">
            <button type="submit" class="primary">
              Connect {prov.id}
            </button>
            {prov.oauth && (
              <button
                type="button"
                onClick={() =>
                  act(async () => {
                    const r = await get<{ authorize_url: string }>('/v1/integrations/' + prov.id + '/oauth/start?project_id=' + seg(id))
                    location.assign(r.authorize_url)
                  })
                }
              >
                Connect with OAuth
              </button>
            )}
          </div>
        </Form>
        <p class="hint">Credentials are stored sealed and never shown again. Connecting checks them and pushes the settings in a job.</p>
      </section>
    </>
  )
}
