import { useEffect, useState } from 'preact/hooks'
import { get, post } from '../api'
import { Form } from '../ui'

/** useSignupMode reads who may sign up (GET /v1/signup): closed, invite or open; '' until known. */
export function useSignupMode(): string {
  const [mode, setMode] = useState('')
  useEffect(() => {
    get<{ mode: string }>('/v1/signup').then((r) => setMode(r.mode), () => setMode(''))
  }, [])
  return mode
}

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const mode = useSignupMode()
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  return (
    <main class="signin">
      <h1>Sign in to the appliance</h1>
      <Form
        label="Sign in"
        onSubmit={async () => {
          await post('/v1/auth/sessions', { email, password, cookie: true })
          onSignedIn()
        }}
      >
        <label for="email">Email</label>
        <input id="email" type="email" autoComplete="username" required value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
        <label for="password">Password</label>
        <input id="password" type="password" autoComplete="current-password" required value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />
        <button type="submit" class="primary">
          Sign in
        </button>
      </Form>
      {(mode === 'open' || mode === 'invite') && (
        <p>
          New here? <a href="/signup">Create an organization</a>
          {mode === 'invite' && ' (with the invite link an operator sent you)'}.
        </p>
      )}
      <p class="hint">
        The first start of <code>appliance up</code> printed the owner's email and password (also in <code>bootstrap.json</code>).
      </p>
    </main>
  )
}
