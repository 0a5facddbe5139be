/* policy.c — the registry of policies, and configuration checks.
 *
 * Adding a policy: a policy-NAME.c file defining its sluice__NAME_ops
 * (declared in policy-NAME.h), a kind in sluice.h, and one line below;
 * its row of a call on a live key, if it has one, in policy-NAME.h and in
 * limiter.c's call_live (limiter-internal.h says why). */
#include "limiter-internal.h"
#include "plans-internal.h"
#include "policy-audit.h"
#include "policy-debounce.h"
#include "policy-rate.h"
#include "policy-throttle.h"

const struct sluice__policy_ops *const sluice__policies[SLUICE__POLICY_KINDS] = {
    [SLUICE_THROTTLE] = &sluice__throttle_ops,
    [SLUICE_AUDIT] = &sluice__audit_ops,
    [SLUICE_DEBOUNCE] = &sluice__debounce_ops,
    [SLUICE_RATE] = &sluice__rate_ops,
};

static const char *policy_check(const sluice_policy_t *p, int *code) {
    const struct sluice__policy_ops *ops = sluice__policy_ops_of((int)p->kind);
    if (!ops) {
        *code = SLUICE_EINVAL;
        return "policy.kind is not a known policy (SLUICE_THROTTLE, SLUICE_AUDIT, SLUICE_DEBOUNCE or SLUICE_RATE)";
    }
    return ops->explain(p, code);
}

int sluice_policy_validate(const sluice_policy_t *p) {
    if (!p) return SLUICE_EINVAL;
    int code = 0;
    return policy_check(p, &code) ? code : 0;
}

const char *sluice__config_check(const sluice_config_t *c, int *code) {
    *code = SLUICE_EINVAL;
    if (!c) return "the configuration pointer is NULL";
    const char *why;
    if (c->plans) {
        /* plans replace the policy's numbers: sluice_rate_plans() */
        if (c->policy.kind != SLUICE_RATE)
            return "plans is set but policy.kind is not SLUICE_RATE: plans are rate quotas";
        if ((why = sluice__plans_ops.explain(&c->policy, code)) != NULL) return why;
        static _Thread_local char plans_why[SLUICE_PLANS_MESSAGE_MAX];
        if ((*code = sluice__plans_check(c->plans, plans_why, sizeof plans_why)) != 0) return plans_why;
    } else if ((why = policy_check(&c->policy, code)) != NULL) {
        return why;
    }
    *code = SLUICE_EINVAL;
    if (c->tick_ns > SLUICE_TICK_MAX_NS)
        return "tick_ns is above SLUICE_TICK_MAX_NS: the wheel's tick must be at most one second (0 for the default)";
    if (!sluice__allocator_valid(c->allocator))
        return "allocator has a NULL alloc or release: set both, or pass a NULL allocator for malloc/free";
    if (!c->on_event && !sluice__policy_ops_of((int)c->policy.kind)->never_schedules(&c->policy))
        return "on_event is NULL but the policy can keep tokens for later: its emissions and drops would be lost "
               "(only rate, pass-through and policies without a trailing edge may go without a callback)";
    *code = 0;
    return NULL;
}

const char *sluice_config_explain(const sluice_config_t *config) {
    int code;
    return sluice__config_check(config, &code);
}
