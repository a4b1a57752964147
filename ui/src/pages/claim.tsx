import { useState } from 'preact/hooks'
import { api, post, seg, type Me, type Schemas } from '../api'
import { navigate } from '../router'
import { Badge, ErrorBox, isOrgAdmin, useLoad, when } from '../ui'

type Ephemeral = Schemas['EphemeralResponse']

/** tokenOf reads a claim token from what a person pasted: the token itself, or a whole claim link (its
 * #token= fragment); '' when there is none. */
function tokenOf(pasted: string): string {
  const v = pasted.trim()
  const hash = v.indexOf('#')
  if (hash >= 0) return new URLSearchParams(v.slice(hash + 1)).get('token') ?? ''
  return /^eph_\S+$/.test(v) ? v : ''
}

/** Claim is the page an ephemeral database's claim_url opens: the token comes in the URL's fragment
 * (browsers never send it), the signed-in person claims the database into their organization. A link
 * opened without its fragment asks for the token (or the whole link) to be pasted. */
export function Claim({ id, me }: { id: string; me: Me }) {
  const [token, setToken] = useState(() => new URLSearchParams(location.hash.slice(1)).get('token') ?? '')
  const [pasted, setPasted] = useState('')
  const [pasteError, setPasteError] = useState('')
  const path = '/v1/ephemeral-databases/' + seg(id)
  const db = useLoad(() => (token ? api<Ephemeral>('GET', path, undefined, { 'X-Service-Claim-Token': token }) : Promise.resolve(undefined)), [id, token])
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const admin = isOrgAdmin(me)
  const e = db.data?.ephemeral_database
  return (
    <main class="narrow">
      <h1>Claim a database</h1>
      <ErrorBox error={db.error} />
      {(!token || db.error) && (
        <form
          class="card"
          aria-label="Claim token"
          onSubmit={(ev) => {
            ev.preventDefault()
            const t = tokenOf(pasted)
            if (!t) return setPasteError('paste the claim token (eph_…) or the whole claim link, #token=… included')
            setPasteError('')
            const link = pasted.trim().match(/\/claim\/([^/#?\s]+)/)
            if (link && decodeURIComponent(link[1]) !== id) navigate('/claim/' + link[1]) // a link to another database
            setToken(t)
          }}
        >
          <p>{token ? 'This token does not open the database.' : 'This link has no claim token (the part after #token= of the claim link).'} Paste the token, or the whole link as it was printed:</p>
          <label for="claim-token">Claim token or link</label>
          <input id="claim-token" type="password" autoComplete="off" required value={pasted} onInput={(e) => setPasted((e.target as HTMLInputElement).value)} />
          <button type="submit" class="primary spaced">
            Use this token
          </button>
          <ErrorBox error={pasteError} />
        </form>
      )}
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
