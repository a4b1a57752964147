import { useState } from 'preact/hooks'
import { get, post, seg, type Schemas } from '../api'
import { ErrorBox, message, useLoad, when } from '../ui'

type Details = Schemas['CLILoginDetails']

/** CLILogin is the page `appliance login` sends a person to: it shows what the device asks for and the
 * code the terminal printed, to compare before approving; Refuse refuses the login on the server. */
export function CLILogin({ id }: { id: string }) {
  const path = '/v1/cli/login/sessions/' + seg(id)
  const { data, error, reload } = useLoad(() => get<Details>(path + '/details'), [id])
  const [done, setDone] = useState('')
  const [actionError, setActionError] = useState('')
  return (
    <main class="narrow">
      <h1>Approve a CLI login</h1>
      <ErrorBox error={error} />
      {data && (
        <section class="card">
          {data.user_code && (
            <div class="user-code">
              <p>Approve only if your terminal shows this code:</p>
              <p class="code">
                <strong>{data.user_code}</strong>
              </p>
            </div>
          )}
          <dl class="facts">
            <dt>Device</dt>
            <dd>{data.device_name || '(unnamed)'}</dd>
            <dt>Key name</dt>
            <dd>{data.key_name}</dd>
            <dt>Scopes</dt>
            <dd>{data.scopes.join(', ')}</dd>
            <dt>Key expires</dt>
            <dd>{data.key_expires_at ? when(data.key_expires_at) : 'never'}</dd>
            <dt>Login expires</dt>
            <dd>{when(data.expires_at)}</dd>
            <dt>State</dt>
            <dd>{data.state}</dd>
          </dl>
          {done && <p role="status">{done}</p>}
          {data.state === 'pending' && !done && (
            <div class="actions">
              <button
                class="primary"
                onClick={async () => {
                  setActionError('')
                  try {
                    await post(path + '/authorize')
                    setDone('Approved: the CLI receives its key on its next poll. You can close this page.')
                    reload()
                  } catch (e) {
                    setActionError(message(e))
                  }
                }}
              >
                Approve
              </button>
              <button
                onClick={async () => {
                  setActionError('')
                  try {
                    await post(path + '/refuse')
                    setDone('Refused: the login can no longer be approved, and the CLI stops without a key.')
                    reload()
                  } catch (e) {
                    setActionError(message(e))
                  }
                }}
              >
                Refuse
              </button>
            </div>
          )}
          <ErrorBox error={actionError} />
        </section>
      )}
    </main>
  )
}
