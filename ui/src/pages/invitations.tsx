import { post, get, seg, type Me, type Schemas } from '../api'
import { navigate } from '../router'
import { Empty, ErrorBox, useAction, useLoad, when } from '../ui'

type Invitation = Schemas['Invitation']

/** invitationLink is the address an admin passes on: it names the invitation and grants nothing by
 * itself (accepting needs the invitee's own session). */
export const invitationLink = (id: string) => location.origin + '/invitations/' + seg(id)

/** Invitations lists the signed-in user's pending invitations (id: the one a link opened) to accept or
 * decline. onJoined reloads the caller's view of /v1/me (a session of no organization moves into the one
 * it joined). */
export function Invitations({ me, id, onJoined }: { me: Me; id?: string; onJoined: () => void }) {
  const list = useLoad(() => get<{ invitations: Invitation[] }>('/v1/me/invitations'), [])
  const [error, act] = useAction()
  const all = list.data?.invitations ?? []
  const shown = id ? all.filter((i) => i.id === id) : all
  const answer = (inv: Invitation, verb: 'accept' | 'decline') =>
    act(async () => {
      await post('/v1/me/invitations/' + seg(inv.id) + '/' + verb)
      if (verb === 'accept') {
        onJoined()
        navigate('/projects', true)
      } else list.reload()
    })
  return (
    <main>
      <h1>{id ? 'Invitation' : 'Invitations'}</h1>
      {!me.organization && !me.principal.is_admin && <p class="hint">You belong to no organization yet: accept an invitation to start.</p>}
      <ErrorBox error={list.error || error} />
      {list.data && shown.length === 0 && (
        <Empty>
          {id
            ? 'This invitation is not open to the account you are signed in with: it was answered, withdrawn or has expired, or it was sent to another email.'
            : 'No pending invitations.'}
        </Empty>
      )}
      {shown.map((inv) => (
        <section class="card" key={inv.id} aria-label={'Invitation to ' + inv.organization_name}>
          <h2>{inv.organization_name}</h2>
          <p>
            You are invited as <strong>{inv.role}</strong> ({inv.email}). It expires {when(inv.expires_at)}.
          </p>
          <div class="row">
            <button class="primary" onClick={() => answer(inv, 'accept')}>
              Accept and join
            </button>
            <button onClick={() => answer(inv, 'decline')}>Decline</button>
          </div>
        </section>
      ))}
      {id && all.length > shown.length && <p><a href="/invitations">All your invitations</a></p>}
    </main>
  )
}

/** InvitationBanner tells a signed-in user they have pending invitations. */
export function InvitationBanner() {
  const list = useLoad(() => get<{ invitations: Invitation[] }>('/v1/me/invitations'), [])
  const n = list.data?.invitations.length ?? 0
  if (!n) return null
  return (
    <p class="card notice" role="status">
      You have {n} pending invitation{n === 1 ? '' : 's'} to join an organization. <a href="/invitations">Review</a>
    </p>
  )
}
