import { useState } from 'preact/hooks'
import { post, type Schemas } from '../api'
import { navigate } from '../router'
import { ErrorBox, Form } from '../ui'
import { useSignupMode } from './signin'

type SignupResult = Schemas['SignupResult']

/** SignUp is the sign-up page (/signup): email, password and organization name; the invite token from
 * the link (?invite=) and a referral code (?ref=) come with it. */
export function SignUp({ onSignedUp }: { onSignedUp: () => void }) {
  const params = new URLSearchParams(location.search)
  const mode = useSignupMode()
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [orgName, setOrgName] = useState('')
  const [invite, setInvite] = useState(params.get('invite') ?? '')
  const [code, setCode] = useState(params.get('ref') ?? '')
  const [done, setDone] = useState<SignupResult | null>(null)
  const finish = () => {
    navigate('/', true)
    onSignedUp()
  }
  if (done) {
    return (
      <main class="signin">
        <h1>Welcome to {done.organization.name}</h1>
        {done.referral_code_status === 'invalid' && (
          <p class="error" role="alert">
            The referral code {code.toUpperCase()} is not valid: your organization was made without it.
          </p>
        )}
        {done.referral_code_status === 'void' && <p class="hint">The referral code belongs to your own organization's people: it does not count.</p>}
        <p>You own the organization {done.organization.name}. Create its first project next.</p>
        <button class="primary" onClick={finish}>
          Continue
        </button>
      </main>
    )
  }
  return (
    <main class="signin">
      <h1>Create your organization</h1>
      {mode === 'closed' && <ErrorBox error="Sign-up is closed on this appliance: ask its operator for an account." />}
      {mode === 'invite' && !params.get('invite') && <p class="hint">Sign-up here needs an invite: open the link an operator or an organization owner sent you, or paste its token below.</p>}
      <Form
        label="Sign up"
        onSubmit={async () => {
          const res = await post<SignupResult>('/v1/signup', {
            email,
            password,
            organization_name: orgName,
            invite_token: invite.trim(),
            referral_code: code.trim(),
            cookie: true,
          })
          if (res.referral_code_status === 'invalid' || res.referral_code_status === 'void') setDone(res)
          else finish()
        }}
      >
        <label for="signup-email">Email</label>
        <input id="signup-email" type="email" autoComplete="username" required value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
        <label for="signup-password">Password</label>
        <input id="signup-password" type="password" autoComplete="new-password" required minLength={12} maxLength={72} value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />
        <p class="hint">At least 12 characters.</p>
        <label for="signup-org">Organization name</label>
        <input id="signup-org" required maxLength={100} value={orgName} onInput={(e) => setOrgName((e.target as HTMLInputElement).value)} />
        {(mode === 'invite' || invite) && (
          <>
            <label for="signup-invite">Invite</label>
            <input id="signup-invite" required={mode === 'invite'} readOnly={!!params.get('invite')} value={invite} onInput={(e) => setInvite((e.target as HTMLInputElement).value)} />
          </>
        )}
        <label for="signup-ref">Referral code (optional)</label>
        <input id="signup-ref" maxLength={64} autoComplete="off" value={code} onInput={(e) => setCode((e.target as HTMLInputElement).value)} />
        <button type="submit" class="primary" disabled={mode === 'closed'}>
          Sign up
        </button>
      </Form>
      <p class="hint">
        Have an account? <a href="/">Sign in</a>.
      </p>
    </main>
  )
}
