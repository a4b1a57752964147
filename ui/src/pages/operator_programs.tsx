import { useState } from 'preact/hooks'
import { del, get, post, seg, type Schemas } from '../api'
import { Badge, Empty, ErrorBox, Form, SecretField, Table, useListAction, useLoad, when } from '../ui'

type Application = Schemas['ProgramApplication']
type ServiceToken = Schemas['ServiceToken']

const statuses = ['received', 'approved', 'rejected'] as const

/** ProgramApplications is the Operator page's program applications: listed by status, each received one
 * approved with a discount (made at the billing provider) or rejected with a note. */
export function ProgramApplications() {
  const [status, setStatus] = useState<string>('received')
  const list = useLoad(() => get<{ program_applications: Application[] }>('/v1/program-applications' + (status ? '?status=' + status : '')), [status])
  const [deciding, setDeciding] = useState<{ app: Application; verb: 'approve' | 'reject' } | null>(null)
  const [percent, setPercent] = useState('20')
  const [months, setMonths] = useState('12')
  const [code, setCode] = useState('')
  const [note, setNote] = useState('')
  const [decided, setDecided] = useState<Application | null>(null)
  const [actionError] = useListAction(list)
  const open = (app: Application, verb: 'approve' | 'reject') => {
    setDeciding({ app, verb })
    setNote('')
    setCode('')
    setDecided(null)
  }
  return (
    <section class="card" aria-labelledby="applications-title">
      <h2 id="applications-title">Program applications</h2>
      <p class="hint">
        The public website submits them with a service token. Approving one makes a discount at the billing provider: a coupon and a promotion code the applicant redeems once
        at checkout.
      </p>
      <div class="row">
        <div>
          <label for="applications-status">Status</label>
          <select id="applications-status" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
            {statuses.map((s) => (
              <option value={s}>{s}</option>
            ))}
            <option value="">all</option>
          </select>
        </div>
      </div>
      {decided && (
        <div class="notice" aria-live="polite">
          <p>
            {decided.company_name}: {decided.status}
            {decided.discount_code && (
              <>
                {' '}
                with the promotion code <code>{decided.discount_code}</code> (discount {decided.discount_id})
              </>
            )}
            .
          </p>
          <button onClick={() => setDecided(null)}>Done</button>
        </div>
      )}
      {deciding && (
        <div class="card">
          <h3>
            {deciding.verb === 'approve' ? 'Approve' : 'Reject'} {deciding.app.company_name}
          </h3>
          <Form
            label={(deciding.verb === 'approve' ? 'Approve ' : 'Reject ') + deciding.app.company_name}
            onSubmit={async () => {
              const path = '/v1/program-applications/' + seg(deciding.app.id) + '/' + deciding.verb
              const body =
                deciding.verb === 'approve'
                  ? { percent_off: Number(percent), duration_months: Number(months), ...(code ? { code } : {}), ...(note ? { operator_note: note } : {}) }
                  : note
                    ? { operator_note: note }
                    : {}
              const res = await post<{ program_application: Application }>(path, body)
              setDecided(res.program_application)
              setDeciding(null)
              list.reload()
            }}
          >
            <div class="row">
              {deciding.verb === 'approve' && (
                <>
                  <div>
                    <label for="discount-percent">Percent off</label>
                    <input id="discount-percent" type="number" required min={1} max={100} step="any" value={percent} onInput={(e) => setPercent((e.target as HTMLInputElement).value)} />
                  </div>
                  <div>
                    <label for="discount-months">Months (0: first invoice only)</label>
                    <input id="discount-months" type="number" required min={0} max={36} value={months} onInput={(e) => setMonths((e.target as HTMLInputElement).value)} />
                  </div>
                  <div>
                    <label for="discount-code">Promotion code (optional)</label>
                    <input id="discount-code" maxLength={40} pattern="[A-Za-z0-9_\-]{3,40}" value={code} onInput={(e) => setCode((e.target as HTMLInputElement).value)} />
                  </div>
                </>
              )}
              <div>
                <label for="decision-note">Note</label>
                <input id="decision-note" maxLength={2000} value={note} onInput={(e) => setNote((e.target as HTMLInputElement).value)} />
              </div>
              <button type="submit" class={deciding.verb === 'approve' ? 'primary' : 'danger'}>
                {deciding.verb === 'approve' ? 'Approve' : 'Reject'}
              </button>
              <button type="button" onClick={() => setDeciding(null)}>
                Cancel
              </button>
            </div>
          </Form>
        </div>
      )}
      <ErrorBox error={list.error || actionError} />
      {list.data && list.data.program_applications.length === 0 && <Empty>No {status} applications.</Empty>}
      {list.data && list.data.program_applications.length > 0 && (
        <Table cols={['Company', { label: 'Contact', sm: true }, { label: 'Team', sm: true }, 'Status', { label: 'Received', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.program_applications.map((a) => (
            <tr key={a.id}>
              <td>
                {a.company_name}
                <div class="hint">
                  {a.program} · {a.segment}
                </div>
                <div class="hint sm-hide">{a.id}</div>
                <div class="hint sm-hide">{a.use_case}</div>
              </td>
              <td class="sm-hide">
                {a.contact_name}
                <div class="hint">{a.email}</div>
              </td>
              <td class="sm-hide">{a.team_size}</td>
              <td>
                <Badge value={a.status === 'received' ? 'pending' : a.status} label={a.status} />
                {a.discount_code && <div class="hint">code {a.discount_code}</div>}
                {a.operator_note && <div class="hint">{a.operator_note}</div>}
              </td>
              <td class="sm-hide">{when(a.created_at)}</td>
              <td>
                {a.status === 'received' && (
                  <div class="cell-actions">
                    <button aria-label={'Approve ' + a.company_name} onClick={() => open(a, 'approve')}>
                      Approve
                    </button>
                    <button aria-label={'Reject ' + a.company_name} onClick={() => open(a, 'reject')}>
                      Reject
                    </button>
                  </div>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  )
}

/** ServiceTokens is the Operator page's service tokens: minted for the public website (the token shows
 * once), listed, revoked. */
export function ServiceTokens() {
  const list = useLoad(() => get<{ service_tokens: ServiceToken[] }>('/v1/service-tokens'), [])
  const [name, setName] = useState('')
  const [minted, setMinted] = useState<{ name: string; token: string } | null>(null)
  const [actionError, act] = useListAction(list)
  return (
    <section class="card" aria-labelledby="service-tokens-title">
      <h2 id="service-tokens-title">Service tokens</h2>
      <p class="hint">A service token lets the public website submit program applications (POST /v1/program-applications) and nothing else.</p>
      {minted && (
        <div class="notice" aria-live="polite">
          <p>Service token {minted.name} minted: it is shown only now. Put it in the website's configuration.</p>
          <SecretField label="Service token" value={minted.token} />
          <button onClick={() => setMinted(null)}>Done</button>
        </div>
      )}
      <Form
        label="Mint a service token"
        onSubmit={async () => {
          const res = await post<{ service_token: ServiceToken; plaintext_token: string }>('/v1/service-tokens', { name })
          setMinted({ name: res.service_token.name, token: res.plaintext_token })
          setName('')
          list.reload()
        }}
      >
        <div class="row">
          <div>
            <label for="service-token-name">Token name</label>
            <input id="service-token-name" required maxLength={100} placeholder="www.example.com" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </div>
          <button type="submit" class="primary">
            Mint
          </button>
        </div>
      </Form>
      <ErrorBox error={list.error || actionError} />
      {list.data && list.data.service_tokens.length === 0 && <Empty>No service tokens.</Empty>}
      {list.data && list.data.service_tokens.length > 0 && (
        <Table cols={['Token', 'Status', { label: 'Last used', sm: true }, { label: 'Created', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.service_tokens.map((t) => (
            <tr key={t.id}>
              <td>
                {t.name}
                <div class="hint">
                  {t.token_prefix}… · {t.id}
                </div>
              </td>
              <td>{t.is_active ? <Badge value="active" /> : <Badge value="disabled" label="revoked" />}</td>
              <td class="sm-hide">{t.last_used_at ? when(t.last_used_at) : 'never'}</td>
              <td class="sm-hide">{when(t.created_at)}</td>
              <td>
                {t.is_active && (
                  <div class="cell-actions">
                    <button
                      aria-label={'Revoke ' + t.name}
                      onClick={() => confirm(`Revoke ${t.name}? The website can no longer submit applications with it.`) && act(() => del('/v1/service-tokens/' + seg(t.id)))}
                    >
                      Revoke
                    </button>
                  </div>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  )
}
