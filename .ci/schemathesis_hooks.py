"""schemathesis hooks for `.ci/schemathesis` (loaded through SCHEMATHESIS_HOOKS).

A schema-valid request can still name a plan or a login that the database does not hold, or
reuse an idempotency key for a different request. The contract answers those with a 422 and a
stable code (docs/design.md, errors and idempotency): that is a correct refusal, not a rejection of valid
data. The `positive_data_acceptance` check (ST202) cannot know it, so its failures are dropped
here, and only here: for a 422 whose problem `code` is one this operation documents. Any other
status, and a 422 with any other code, still fails the run.
"""

from __future__ import annotations

import schemathesis

UNKNOWN_PLAN = "Reseller.UnknownPlan"
UNKNOWN_LOGIN = "Reseller.UnknownLogin"
KEY_REUSED = "Reseller.IdempotencyKeyReused"

DOCUMENTED_422 = {
    "issueLicense": {UNKNOWN_PLAN, UNKNOWN_LOGIN, KEY_REUSED},
    "generatePromoBatch": {UNKNOWN_PLAN, KEY_REUSED},
    "redeemPromoCode": {UNKNOWN_LOGIN, KEY_REUSED},
    "listUserLicenses": {UNKNOWN_LOGIN},
    "setLowBalanceAlert": {UNKNOWN_PLAN},
    "getUserEntitlements": {UNKNOWN_LOGIN},
}

PAYLOAD_TOO_LARGE = "Request.PayloadTooLarge"

# Schema-valid values the contract still refuses with 400 naming the field.
DOCUMENTED_400 = {
    "createWebhookEndpoint": "url",
    "changePassword": "currentPassword",
}

# A seeded promo code can be voided by the stateful phase (it voids batches and codes), or
# expire: the contract answers 410 with one of these codes.
DOCUMENTED_410 = {
    "redeemPromoCode": {"Promo.CodeVoided", "Promo.CodeExpired"},
}

# A list's `cursor` is opaque: only a `nextCursor` the server returned for the same list and
# filter is one (docs/design.md, pagination); any other string is refused with 400 naming
# `cursor`, on every operation that takes one.
CURSOR = "cursor"


def problem_code(response) -> str | None:
    try:
        body = response.json()
    except Exception:  # noqa: BLE001 - a body that is not JSON is no documented answer
        return None
    return body.get("code") if isinstance(body, dict) else None


def problem_field(response) -> str | None:
    try:
        body = response.json()
    except Exception:  # noqa: BLE001 - a body that is not JSON is no documented answer
        return None
    return body.get("field") if isinstance(body, dict) else None


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    """Keep every failure but ST202 for a documented 422, 410 or 400 (a list's `cursor` that the
    server never returned, the fields of DOCUMENTED_400), ST201 for the documented 413, and
    ST301 for a revoked license that is still readable as revoked.

    A schema-violating body that is also over 16 KiB (a URL past its 2048 characters, as
    `\\uXXXX` escapes) is refused before it is parsed, with `413 Request.PayloadTooLarge`: a
    refusal, and the one the operation documents for it.
    """
    code = getattr(failure, "code", None)
    operation_id = case.operation.definition.raw.get("operationId")
    if code == "ST301" and response.status_code == 200:
        # `DELETE /v1/billing/partner/licenses/{licenseId}` revokes: the license stays readable
        # with `revokedUtc` set (docs/design.md, revocation), so a later GET answers 200, not
        # 404. Keep the failure only if what answered is not marked revoked.
        try:
            body = response.json()
        except Exception:  # noqa: BLE001 - a body that is not JSON is no documented answer
            return True
        return not (isinstance(body, dict) and body.get("revokedUtc") is not None)
    if code == "ST202" and response.status_code == 410:
        return problem_code(response) not in DOCUMENTED_410.get(operation_id, set())
    if (
        code == "ST202"
        and response.status_code == 400
        and problem_field(response) == CURSOR
        and any(p.get("name") == CURSOR for p in case.operation.definition.raw.get("parameters", []))
    ):
        return False
    if code == "ST202" and response.status_code == 400 and operation_id in DOCUMENTED_400:
        # A schema-valid URL can still be refused (not https; a private, loopback or metadata
        # address; a host that does not resolve), and a well-formed current password can be
        # wrong: the contract answers 400 naming that field.
        return problem_field(response) != DOCUMENTED_400[operation_id]
    if code == "ST201" and response.status_code == 413:
        return problem_code(response) != PAYLOAD_TOO_LARGE
    if code != "ST202" or response.status_code != 422:
        return True
    return problem_code(response) not in DOCUMENTED_422.get(operation_id, set())
