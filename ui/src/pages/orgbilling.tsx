import { get, seg, type Organization } from '../api'
import { ErrorBox, useLoad, when } from '../ui'

/** BillingStatus is the organization's billing as its billing provider's webhooks last set it (status,
 * plan, end of the period), or says that billing is not configured: the appliance has no billing provider
 * (up --billing-provider), so the organization has no customer there. */
export function BillingStatus({ orgID }: { orgID: string }) {
  const { data, error } = useLoad(() => get<{ organization: Organization }>('/v1/organizations/' + seg(orgID)), [orgID])
  const o = data?.organization
  return (
    <section class="card" aria-labelledby="billing-heading">
      <h2 id="billing-heading">Billing</h2>
      <ErrorBox error={error} />
      {o &&
        (o.billing_provider === '' ? (
          <p class="hint">Billing is not configured on this appliance: no billing provider, so nothing is charged and the billing status stays empty.</p>
        ) : (
          <dl class="facts">
            <dt>Status</dt>
            <dd>{o.billing_status ? <span class={'badge badge-' + (o.billing_status === 'active' || o.billing_status === 'trialing' ? 'active' : 'failed')}>{o.billing_status}</span> : 'no subscription yet'}</dd>
            <dt>Plan</dt>
            <dd>{o.billing_plan && o.billing_plan !== 'none' ? o.billing_plan : 'none'}</dd>
            <dt>Period ends</dt>
            <dd>{o.billing_period_end ? when(o.billing_period_end) : '—'}</dd>
            <dt>Provider</dt>
            <dd>
              {o.billing_provider} (customer {o.billing_customer_id})
            </dd>
          </dl>
        ))}
    </section>
  )
}
