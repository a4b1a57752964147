import { useState } from 'preact/hooks'
import { post } from '../api'
import { Form } from '../ui'

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
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
      <p class="hint">
        The first start of <code>appliance up</code> printed the owner's email and password (also in <code>bootstrap.json</code>).
      </p>
    </main>
  )
}
