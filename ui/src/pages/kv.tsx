import { useState } from 'preact/hooks'
import { del, get, post, seg, type Schemas } from '../api'
import { Badge, CopyField, Empty, ErrorBox, SecretField, useListAction, when } from '../ui'
import { useProjectLoad } from '../events'

type KV = Schemas['KVStore']

/** kvState is what a person reads for a store's state (the spec: running shows as Ready). */
const kvState = (s: string) => (s === 'running' ? 'Ready' : s)

/** The project's key-value store: create it, see its state and how to connect, rotate its token, flush it, delete it. */
export function KVTab({ id, path, orgID, active }: { id: string; path: string; orgID: string; active: boolean }) {
  const base = path + '/kv'
  // The organization's list says whether the project has a store (GET .../kv would answer 404 when not).
  const kv = useProjectLoad(
    id,
    () => get<{ kv_stores: KV[] }>('/v1/kv?organization_id=' + seg(orgID)).then((l) => l.kv_stores.find((s) => s.project_id === id) ?? null),
    [id, orgID],
  )
  // A token the API returned (create, rotate-token): shown here once, never again.
  const [token, setToken] = useState<{ title: string; store: KV } | null>(null)
  const [error, act] = useListAction(kv)
  const s = kv.data
  return (
    <>
      {token && token.store.token && (
        <section class="card notice" aria-live="polite">
          <h2>{token.title}</h2>
          <p>This is the only time the token is shown: the appliance keeps only its hash. Copy what your application needs now.</p>
          <SecretField label="Token" value={token.store.token} />
          <SecretField label="Redis URL with the token" value={token.store.credentials.redis_url} />
          <CopyField label="REST URL (UPSTASH_REDIS_REST_URL)" value={token.store.credentials.rest_url} />
          <button onClick={() => setToken(null)}>Done</button>
        </section>
      )}
      <ErrorBox error={kv.error || error} />
      {s === null && (
        <section class="card">
          <h2>Key-value store</h2>
          <Empty>
            No key-value store. Create one: a Redis server of its own, reached over TLS by Redis clients (RESP) and by Upstash's REST
            protocol, sized by the project's plan.
          </Empty>
          <button
            class="primary spaced"
            disabled={!active}
            onClick={() =>
              act(async () => {
                const res = await post<{ kv_store: KV }>(base)
                setToken({ title: 'Key-value store created', store: res.kv_store })
              })
            }
          >
            Create key-value store
          </button>
          {!active && <p class="hint">The project must be active.</p>}
        </section>
      )}
      {s && (
        <>
          <dl class="facts">
            <dt>State</dt>
            <dd>
              <Badge value={s.state} label={kvState(s.state)} />
            </dd>
            <dt>Memory</dt>
            <dd>
              {s.maxmemory_mb} MB, {s.maxmemory_policy}
            </dd>
            <dt>Persistence</dt>
            <dd>{s.persistence} snapshots (not backed up)</dd>
            <dt>Token</dt>
            <dd>
              <code>{s.token_prefix}…</code>
            </dd>
            <dt>Created</dt>
            <dd>{when(s.created_at)}</dd>
          </dl>
          {s.last_error && (
            <div class="error" role="alert">
              {s.last_error}
            </div>
          )}
          <section class="card">
            <h2>Connect</h2>
            <CopyField label="Redis URL (RESP over TLS; the token is the password)" value={s.credentials.redis_url} />
            <CopyField label="REST URL (Upstash's protocol)" value={s.credentials.rest_url} />
            <CopyField
              label="redis-cli"
              value={`REDISCLI_AUTH=<token> redis-cli --tls --cacert appliance-ca.crt -h ${s.credentials.redis_host} -p ${s.credentials.redis_port}`}
            />
            <p class="hint">
              The token is shown only when the store is created and when it is rotated. Clients verify the server against{' '}
              <a href="/v1/ca.crt" download="appliance-ca.crt">
                the appliance's CA certificate
              </a>
              .
            </p>
          </section>
          <section class="card">
            <h2>Manage</h2>
            <div class="actions">
              <button
                disabled={s.state !== 'running'}
                onClick={() =>
                  confirm('Rotate the token? The current one stops working at once and every connection made with it is closed.') &&
                  act(async () => {
                    const res = await post<{ kv_store: KV }>(base + '/rotate-token')
                    setToken({ title: 'New token', store: res.kv_store })
                  })
                }
              >
                Rotate token
              </button>
              <button
                disabled={s.state !== 'running'}
                onClick={() => confirm('Delete every key of the store? There is no undo.') && act(() => post(base + '/flush'))}
              >
                Flush
              </button>
              <button
                class="danger"
                disabled={s.state === 'destroying'}
                onClick={() =>
                  confirm('Delete the key-value store, its server and every key? The project and its database are untouched.') &&
                  act(() => del(base))
                }
              >
                Delete store
              </button>
            </div>
          </section>
        </>
      )}
    </>
  )
}
