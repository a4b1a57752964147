import { useState } from 'preact/hooks'
import { del, get, post, seg, type Schemas } from '../api'
import { Badge, CopyField, Empty, ErrorBox, Form, Table, useListAction, useLoad, when } from '../ui'
import { useSignupMode } from './signin'

type Invite = Schemas['SignupInvite']

const modes: Record<string, string> = {
  closed: 'closed: only operators make organizations (up --signup).',
  invite: 'by invite: people holding a sign-up invite link make their organization (up --signup).',
  open: 'open: anyone makes their organization on the sign-up page (up --signup).',
}

/** SignupInvites is the sign-up invites of path: minted (the link shows once), listed, revoked. The
 * operators' (/v1/signup-invites, every invite) by default; an organization's owners' with its
 * /v1/organizations/{orgID}/signup-invites (whoever signs up with one gets an organization of their own). */
export function SignupInvites({ path = '/v1/signup-invites', owner = false }: { path?: string; owner?: boolean }) {
  const mode = useSignupMode()
  const list = useLoad(() => get<{ signup_invites: Invite[] }>(path), [path])
  const [email, setEmail] = useState('')
  const [note, setNote] = useState('')
  const [made, setMade] = useState<{ url: string; email: string } | null>(null)
  const [actionError, act] = useListAction(list)
  return (
    <section class="card" aria-labelledby="signup-invites-heading">
      <h2 id="signup-invites-heading">Sign-up invites</h2>
      {mode && <p class="hint">Sign-up on this appliance is {modes[mode] ?? mode}</p>}
      {owner && <p class="hint">Invite someone to the appliance: whoever signs up with your link gets an organization of their own (to add people to this organization, invite them as members).</p>}
      {made && (
        <div class="notice" aria-live="polite">
          <p>Send this link{made.email ? ' to ' + made.email : ''}: it is shown only now, works once and expires in a week.</p>
          <CopyField label="Invite link" value={made.url} />
          <button onClick={() => setMade(null)}>Hide the link</button>
        </div>
      )}
      <Form
        label="Create a sign-up invite"
        onSubmit={async () => {
          const res = await post<{ url: string }>(path, { email, note })
          setMade({ url: res.url, email })
          setEmail('')
          setNote('')
          list.reload()
        }}
      >
        <div class="row">
          <div>
            <label for="invite-email">For (email, optional)</label>
            <input id="invite-email" type="email" value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
          </div>
          <div>
            <label for="invite-note">Note</label>
            <input id="invite-note" maxLength={200} value={note} onInput={(e) => setNote((e.target as HTMLInputElement).value)} />
          </div>
          <button type="submit" class="primary">
            Create invite
          </button>
        </div>
      </Form>
      <ErrorBox error={list.error || actionError} />
      {list.data && list.data.signup_invites.length === 0 && <Empty>No sign-up invites.</Empty>}
      {list.data && list.data.signup_invites.length > 0 && (
        <Table cols={['Invite', 'State', { label: 'Expires', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.signup_invites.map((i) => (
            <tr key={i.id}>
              <td>
                {i.note || i.email || i.id}
                <div class="hint">
                  {i.email && i.note ? i.email + ' · ' : ''}
                  {i.organization_id ? 'made ' + i.organization_id : i.id}
                  {!owner && i.invited_by_organization_id ? ' · from ' + i.invited_by_organization_id : ''}
                </div>
              </td>
              <td>
                <Badge value={i.state} />
              </td>
              <td class="sm-hide">{when(i.expires_at)}</td>
              <td>
                {i.state === 'pending' && (
                  <button aria-label={'Revoke the invite ' + (i.note || i.email || i.id)} onClick={() => act(() => del(path + '/' + seg(i.id)))}>
                    Revoke
                  </button>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  )
}
