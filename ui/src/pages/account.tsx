import { useState } from 'preact/hooks'
import { post, type Me } from '../api'
import { Form } from '../ui'

export function Account({ me }: { me: Me }) {
  const [current, setCurrent] = useState('')
  const [next, setNext] = useState('')
  const [again, setAgain] = useState('')
  const [done, setDone] = useState('')
  return (
    <main class="narrow">
      <h1>Account</h1>
      <dl class="facts">
        <dt>Organization</dt>
        <dd>{me.organization?.name ?? '(platform administrator)'}</dd>
        <dt>Role</dt>
        <dd>{me.principal.is_admin ? 'platform administrator' : me.principal.idp_organization_role}</dd>
      </dl>
      <section class="card">
        <h2>Change password</h2>
        {done && <p role="status">{done}</p>}
        <Form
          label="Change password"
          onSubmit={async () => {
            if (next !== again) throw new Error('the new passwords differ')
            const res = await post<{ sessions_revoked: number }>('/v1/auth/password', { current_password: current, new_password: next })
            setDone(`Password changed; ${res.sessions_revoked} other session(s) signed out.`)
            setCurrent('')
            setNext('')
            setAgain('')
          }}
        >
          <label for="pw-current">Current password</label>
          <input id="pw-current" type="password" autoComplete="current-password" required value={current} onInput={(e) => setCurrent((e.target as HTMLInputElement).value)} />
          <label for="pw-new">New password (12 to 72 characters)</label>
          <input id="pw-new" type="password" autoComplete="new-password" required minLength={12} value={next} onInput={(e) => setNext((e.target as HTMLInputElement).value)} />
          <label for="pw-again">New password again</label>
          <input id="pw-again" type="password" autoComplete="new-password" required minLength={12} value={again} onInput={(e) => setAgain((e.target as HTMLInputElement).value)} />
          <button type="submit" class="primary spaced">
            Change password
          </button>
        </Form>
      </section>
    </main>
  )
}
