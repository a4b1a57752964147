import { useState } from 'preact/hooks'
import { del, get, patch, post, seg, type Me, type Schemas } from '../api'
import { CopyField, Empty, ErrorBox, Form, isOrgAdmin, SecretField, Table, useListAction, useLoad, when } from '../ui'
import { invitationLink } from './invitations'

type Member = Schemas['Member']

const roles = ['member', 'admin', 'owner']

export function Members({ me }: { me: Me }) {
  const base = '/v1/organizations/' + seg(me.organization!.id) + '/members'
  const list = useLoad(() => get<{ members: Member[] }>(base), [base])
  const [email, setEmail] = useState('')
  const [name, setName] = useState('')
  const [role, setRole] = useState('member')
  const [added, setAdded] = useState<{ email: string; password: string } | null>(null)
  const [invited, setInvited] = useState<{ email: string; id: string } | null>(null)
  const [actionError, act] = useListAction(list)
  const admin = isOrgAdmin(me)
  return (
    <main>
      <h1>Members</h1>
      {added && (
        <section class="card notice" aria-live="polite">
          <h2>{added.email} added</h2>
          <p>Their initial password is shown only now. Hand it over safely; they change it under Account.</p>
          <SecretField label="Initial password" value={added.password} />
          <button onClick={() => setAdded(null)}>Done</button>
        </section>
      )}
      {invited && (
        <section class="card notice" aria-live="polite">
          <h2>{invited.email} invited</h2>
          <p>This email already has an account, so it got an invitation: they join when they accept it, signed in. Send them this link (it grants nothing by itself: it asks them to sign in with that email). Pending invitations do not show in the list below.</p>
          <CopyField label="Invitation link" value={invitationLink(invited.id)} />
          <button onClick={() => setInvited(null)}>Done</button>
        </section>
      )}
      {admin && (
        <section class="card">
          <h2>Add a person</h2>
          <Form
            label="Add a member"
            onSubmit={async () => {
              const res = await post<{ initial_password: string; invitation: { id: string } | null }>(base, { email, name, role })
              if (res.initial_password) setAdded({ email, password: res.initial_password })
              if (res.invitation) setInvited({ email, id: res.invitation.id })
              setEmail('')
              setName('')
              list.reload()
            }}
          >
            <div class="row">
              <div>
                <label for="member-email">Email</label>
                <input id="member-email" type="email" required value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
              </div>
              <div>
                <label for="member-name">Name</label>
                <input id="member-name" maxLength={100} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
              </div>
              <div>
                <label for="member-role">Role</label>
                <select id="member-role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value)}>
                  {roles.map((r) => (
                    <option value={r}>{r}</option>
                  ))}
                </select>
              </div>
              <button type="submit" class="primary">
                Add
              </button>
            </div>
          </Form>
          <p class="hint">Members may use projects and backups; admins and owners also create and delete projects, restore, import and manage keys and people. Only owners make owners.</p>
        </section>
      )}
      <ErrorBox error={list.error || actionError} />
      {list.data && list.data.members.length === 0 && <Empty>No members.</Empty>}
      {list.data && list.data.members.length > 0 && (
        <Table cols={['Person', 'Role', { label: 'Since', sm: true }, { label: 'Actions', hidden: true }]}>
            {list.data.members.map((m) => (
              <tr key={m.user_id}>
                <td>
                  {m.name || m.email}
                  {m.name && <div class="hint">{m.email}</div>}
                </td>
                <td>
                  {admin ? (
                    <select
                      aria-label={'Role of ' + m.email}
                      value={m.role}
                      onChange={(e) => act(() => patch(base + '/' + seg(m.user_id), { role: (e.target as HTMLSelectElement).value }))}
                    >
                      {roles.map((r) => (
                        <option value={r}>{r}</option>
                      ))}
                    </select>
                  ) : (
                    m.role
                  )}
                </td>
                <td class="sm-hide">{when(m.created_at)}</td>
                <td>
                  {admin && m.user_id !== me.principal.user_id && (
                    <button
                      aria-label={'Remove ' + m.email}
                      onClick={() =>
                        confirm(`Remove ${m.email}? Their sessions end and the API keys they created here are revoked.`) &&
                        act(() => del(base + '/' + seg(m.user_id)))
                      }
                    >
                      Remove
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
