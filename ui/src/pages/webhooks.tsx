import { useState } from 'preact/hooks'
import { del, get, patch, post, seg, type Me, type Schemas } from '../api'
import { EventTypeValues } from '../../../clients/typescript/src/enums'
import { Badge, Empty, ErrorBox, Form, isOrgAdmin, SecretField, Table, useListAction, useLoad, when } from '../ui'

type Endpoint = Schemas['WebhookEndpoint']
type Delivery = Schemas['WebhookDelivery']

// The event types an endpoint can take: the API's EventType enum, generated into the TypeScript client
// from the OpenAPI document (which reads the event table), never listed here.
const eventTypes = EventTypeValues

export function Webhooks({ me }: { me: Me }) {
  const base = '/v1/organizations/' + seg(me.organization!.id) + '/webhook-endpoints'
  const list = useLoad(() => get<{ webhook_endpoints: Endpoint[] }>(base), [base], 10000)
  const [url, setURL] = useState('')
  const [description, setDescription] = useState('')
  const [types, setTypes] = useState<Schemas['EventType'][]>([])
  const [secret, setSecret] = useState<{ title: string; value: string } | null>(null)
  const [open, setOpen] = useState('')
  const [actionError, act] = useListAction(list)
  const admin = isOrgAdmin(me)
  const mayWrite = admin && me.principal.scopes.includes('organizations:write')
  return (
    <main>
      <h1>Webhooks</h1>
      <p class="hint">
        Events are delivered to your endpoints signed the Standard Webhooks way (standardwebhooks.com)
        (headers webhook-id, webhook-timestamp, webhook-signature), retried for about 28 hours when they fail.
      </p>
      {secret && (
        <section class="card notice" aria-live="polite">
          <h2>{secret.title}</h2>
          <p>This is the only time the signing secret is shown: store it where your receiver verifies deliveries.</p>
          <SecretField label="Signing secret" value={secret.value} />
          <button onClick={() => setSecret(null)}>Done</button>
        </section>
      )}
      {mayWrite && (
        <section class="card">
          <h2>New endpoint</h2>
          <Form
            label="Add a webhook endpoint"
            onSubmit={async () => {
              const res = await post<{ webhook_endpoint: Endpoint; plaintext_secret: string }>(base, { url, description, event_types: types })
              setSecret({ title: 'Endpoint ' + res.webhook_endpoint.url + ' added', value: res.plaintext_secret })
              setURL('')
              setDescription('')
              list.reload()
            }}
          >
            <div class="row">
              <div>
                <label for="hook-url">URL</label>
                <input id="hook-url" type="url" required maxLength={2048} placeholder="https://…/hooks" value={url} onInput={(e) => setURL((e.target as HTMLInputElement).value)} />
              </div>
              <div>
                <label for="hook-description">Description</label>
                <input id="hook-description" maxLength={500} value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
              </div>
            </div>
            <fieldset class="scopes">
              <legend>Events (none checked: all)</legend>
              {eventTypes.map((t) => (
                <label class="check">
                  <input type="checkbox" checked={types.includes(t)} onChange={(e) => setTypes((e.target as HTMLInputElement).checked ? [...types, t] : types.filter((x) => x !== t))} />
                  {t}
                </label>
              ))}
            </fieldset>
            <button type="submit" class="primary">
              Add endpoint
            </button>
          </Form>
        </section>
      )}
      <ErrorBox error={list.error || actionError} />
      {list.data && list.data.webhook_endpoints.length === 0 && <Empty>No webhook endpoints: add one to receive job and project events.</Empty>}
      {list.data && list.data.webhook_endpoints.length > 0 && (
        <Table cols={['Endpoint', { label: 'Events', sm: true }, 'Health', { label: 'Actions', hidden: true }]}>
          {list.data.webhook_endpoints.map((ep) => (
            <tr key={ep.id}>
              <td>
                <code class="url">{ep.url}</code>
                {ep.description && <div class="hint">{ep.description}</div>}
              </td>
              <td class="sm-hide">{ep.event_types.length ? ep.event_types.join(', ') : 'all'}</td>
              <td>
                <Badge value={ep.health} />
              </td>
              <td class="actions-cell">
                <div class="cell-actions">
                <button aria-expanded={open === ep.id} aria-label={'Deliveries of ' + ep.url} onClick={() => setOpen(open === ep.id ? '' : ep.id)}>
                  Deliveries
                </button>
                {mayWrite && ep.is_active && (
                  <button aria-label={'Send a test event to ' + ep.url} onClick={() => act(async () => { await post(base + '/' + seg(ep.id) + '/test'); setOpen(ep.id) })}>
                    Test
                  </button>
                )}
                {mayWrite && (
                  <button aria-label={(ep.is_active ? 'Disable ' : 'Enable ') + ep.url} onClick={() => act(() => patch(base + '/' + seg(ep.id), { is_active: !ep.is_active }))}>
                    {ep.is_active ? 'Disable' : 'Enable'}
                  </button>
                )}
                {mayWrite && (
                  <button
                    aria-label={'Rotate secret of ' + ep.url}
                    onClick={() =>
                      confirm('Issue a new signing secret? The old one keeps signing for 24 hours beside it.') &&
                      act(async () => {
                        const res = await post<{ plaintext_secret: string }>(base + '/' + seg(ep.id) + '/rotate-secret')
                        setSecret({ title: 'New secret for ' + ep.url, value: res.plaintext_secret })
                      })
                    }
                  >
                    Rotate secret
                  </button>
                )}
                {mayWrite && (
                  <button
                    aria-label={'Delete ' + ep.url}
                    onClick={() => confirm(`Delete the endpoint ${ep.url} and its deliveries?`) && act(() => del(base + '/' + seg(ep.id)))}
                  >
                    Delete
                  </button>
                )}
                </div>
              </td>
            </tr>
          ))}
        </Table>
      )}
      {open && <Deliveries path={base + '/' + seg(open)} mayWrite={mayWrite} url={list.data?.webhook_endpoints.find((e) => e.id === open)?.url ?? ''} />}
    </main>
  )
}

/** Deliveries lists an endpoint's deliveries, each with its attempts and payload, and redelivers. */
function Deliveries({ path, mayWrite, url }: { path: string; mayWrite: boolean; url: string }) {
  const list = useLoad(() => get<{ deliveries: Delivery[] }>(path + '/deliveries?limit=50'), [path], 3000)
  const [shown, setShown] = useState('')
  const [error, act] = useListAction(list)
  return (
    <section class="card" aria-label={'Deliveries to ' + url}>
      <h2>Deliveries to <code class="url">{url}</code></h2>
      <ErrorBox error={list.error || error} />
      {list.data && list.data.deliveries.length === 0 && <Empty>No deliveries yet: send a test event.</Empty>}
      {list.data && list.data.deliveries.length > 0 && (
        <Table cols={['Event', 'State', { label: 'Attempts', sm: true }, { label: 'Last answer', sm: true }, { label: 'Created', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.deliveries.map((d) => [
            <tr key={d.id}>
              <td>
                {d.event_type}
                <div class="hint">
                  <code class="url">{d.id}</code>
                </div>
              </td>
              <td>
                <Badge value={d.state} />
                {d.next_attempt_at && d.state === 'pending' && <div class="hint">next {when(d.next_attempt_at)}</div>}
              </td>
              <td class="sm-hide">
                {d.attempts} of {d.max_attempts}
              </td>
              <td class="sm-hide">{d.response_status ? 'HTTP ' + d.response_status : d.last_error || '—'}</td>
              <td class="sm-hide">{when(d.created_at)}</td>
              <td class="actions-cell">
                <div class="cell-actions">
                <button aria-expanded={shown === d.id} aria-label={'Details of ' + d.id} onClick={() => setShown(shown === d.id ? '' : d.id)}>
                  Details
                </button>
                {mayWrite && d.state !== 'pending' && (
                  <button aria-label={'Redeliver ' + d.id} onClick={() => act(() => post(path + '/deliveries/' + seg(d.id) + '/redeliver'))}>
                    Redeliver
                  </button>
                )}
                </div>
              </td>
            </tr>,
            shown === d.id && (
              <tr key={d.id + '-details'} class="details">
                <td colSpan={6}>
                  <h3>Attempts</h3>
                  {d.attempt_history.length === 0 ? (
                    <p class="hint">None yet.</p>
                  ) : (
                    <ol class="attempts">
                      {d.attempt_history.map((a) => (
                        <li>
                          {when(a.at)}: {a.response_status ? 'HTTP ' + a.response_status : 'no response'}
                          {a.error && a.response_status === 0 ? ' — ' + a.error : ''} ({a.duration_ms} ms)
                        </li>
                      ))}
                    </ol>
                  )}
                  {d.last_error && <p class="hint">Last error: {d.last_error}</p>}
                  <h3>Payload</h3>
                  <pre class="payload" tabIndex={0} role="region" aria-label={'Payload of ' + d.id}>
                    {JSON.stringify(d.payload, null, 2)}
                  </pre>
                </td>
              </tr>
            ),
          ])}
        </Table>
      )}
    </section>
  )
}
