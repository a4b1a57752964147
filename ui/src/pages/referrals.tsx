import { useState } from 'preact/hooks'
import { get, post, seg, type Me, type Schemas } from '../api'
import { Badge, CopyField, Empty, ErrorBox, Table, isOrgAdmin, useAction, useLoad, when } from '../ui'

type ReferralCode = Schemas['ReferralCode']
type Referral = Schemas['Referral']

/** Referrals is the organization's referral code (made on demand, with its sign-up link to copy) and the
 * organizations that signed up with it. */
export function Referrals({ me }: { me: Me }) {
  const base = '/v1/organizations/' + seg(me.organization!.id)
  const code = useLoad(() => get<{ referral_code: ReferralCode | null }>(base + '/referral-code').then((r) => r.referral_code), [base])
  const list = useLoad(() => get<{ referrals: Referral[] }>(base + '/referrals'), [base])
  const [actionError, act] = useAction()
  const [busy, setBusy] = useState(false)
  const rc = code.data
  return (
    <section class="card" aria-labelledby="referrals-heading">
      <h2 id="referrals-heading">Referrals</h2>
      <ErrorBox error={code.error || list.error || actionError} />
      {rc === null && (
        <>
          <p>Share a referral code: when an organization that signs up with it pays its first invoice, yours gets a discount from the billing provider.</p>
          {isOrgAdmin(me) ? (
            <button
              class="primary"
              disabled={busy}
              onClick={() => {
                setBusy(true)
                act(() => post(base + '/referral-code', {}).then(() => code.reload())).finally(() => setBusy(false))
              }}
            >
              Create a referral code
            </button>
          ) : (
            <p class="hint admin-only">Only an owner or an admin of the organization can create its referral code.</p>
          )}
        </>
      )}
      {rc && (
        <>
          <dl class="facts">
            <dt>Code</dt>
            <dd>
              <code class="referral-code">{rc.code}</code>
            </dd>
            {rc.discount_id && (
              <>
                <dt>Discount for who signs up</dt>
                <dd>{rc.discount_id}</dd>
              </>
            )}
          </dl>
          <CopyField label="Sign-up link" value={rc.signup_url} />
        </>
      )}
      {list.data && list.data.referrals.length === 0 && rc && <Empty>No organization signed up with your code yet.</Empty>}
      {list.data && list.data.referrals.length > 0 && (
        <Table cols={['Organization', 'Status', { label: 'Reward', sm: true }, { label: 'Since', sm: true }]}>
          {list.data.referrals.map((r) => (
            <tr key={r.id}>
              <td>
                <code>{r.referred_organization_id}</code>
              </td>
              <td>
                <Badge value={r.status} />
                {r.void_reason && <div class="hint">{r.void_reason}</div>}
              </td>
              <td class="sm-hide">{r.reward_code || r.reward_discount_id || '—'}</td>
              <td class="sm-hide">{when(r.created_at)}</td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  )
}
