import { useState } from 'preact/hooks'
import { api, post, seg, type Me, type Schemas } from '../api'
import { navigate } from '../router'
import { Badge, ErrorBox, isOrgAdmin, useLoad, when } from '../ui'

type Ephemeral = Schemas['EphemeralResponse']

/** Claim is the page an ephemeral database's claim_url opens: the token comes in the URL's fragment
 * (browsers never send it), the signed-in person claims the database into their organization. */
export function Claim({ id, me }: { id: string; me: Me }) {
  const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? ''
  const path = '/v1/ephemeral-databases/' + seg(id)
  const db = useLoad(
    () => (token ? api<Ephemeral>('GET', path, undefined, { 'X-Service-Claim-Token': token }) : Promise.reject(new Error('this link has no claim token: open the claim_url exactly as it was printed'))),
    [id, token],
  )
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const admin = isOrgAdmin(me)
  const e = db.data?.ephemeral_database
  return (
    <main class="narrow">
      <h1>Claim a database</h1>
      <ErrorBox error={db.error} />
      {e && (
        <section class="card">
          <dl class="facts">
            <dt>Name</dt>
            <dd>{e.name}</dd>
            <dt>State</dt>
            <dd>
              <Badge value={e.state} />
            </dd>
            <dt>PostgreSQL</dt>
            <dd>{e.postgres_version || '-'}</dd>
            <dt>Destroyed</dt>
            <dd>{when(e.expires_at)} unless claimed</dd>
          </dl>
          <p>
            Claiming moves it into <strong>{me.organization?.name ?? 'your organization'}</strong> as a normal project: its data, connection
            strings and credentials stay, and it is kept until you delete it.
          </p>
          {!admin && <p class="hint">Only an owner or an admin of the organization can claim databases into it.</p>}
          <ErrorBox error={error} />
          <button
            class="primary"
            disabled={busy || !admin || !me.organization}
            onClick={async () => {
              setBusy(true)
              setError('')
              try {
                const res = await post<{ project: { id: string } }>(path + '/claim', { claim_token: token })
                history.replaceState(null, '', location.pathname) // the token is spent: drop it from the URL
                navigate('/projects/' + res.project.id)
              } catch (err) {
                setError(String((err as Error).message))
              } finally {
                setBusy(false)
              }
            }}
          >
            Claim into {me.organization?.name ?? 'the organization'}
          </button>
        </section>
      )}
    </main>
  )
}
