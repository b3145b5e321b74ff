"""The payout policy without storage: blocks, effective limits, ceilings and the review hold."""

from __future__ import annotations

from decimal import Decimal

import pytest

from paymentcore._domain import models as models
from paymentcore._domain import policy as _policy
from paymentcore._domain.models import Merchant, MerchantStatus, PayoutLimits, Settings
from paymentcore._domain.policy import (
    DAY_MS,
    REJECTED_REASON,
    REVIEW_REASON,
    WEEK_MS,
    BlockedBy,
    EffectiveLimits,
    blocked_by,
    check_limits,
    effective_limits,
    held_for_review,
)
from paymentcore.catalogue import Catalogue, Currency
from paymentcore.errors import PayoutLimitExceededError

CATALOGUE = Catalogue.default()
XAF = CATALOGUE.currency("XAF", settleable=True)  # no decimals
GHS = CATALOGUE.currency("GHS", settleable=True)  # two decimals
NOW = 1_700_000_000_000


class Spent:
    """A stand-in for the store's spend query: records every window start it is asked about."""

    def __init__(self, amount: int) -> None:
        self.amount = amount
        self.calls: list[int] = []

    def __call__(self, since: int) -> int:
        self.calls.append(since)
        return self.amount


def never(since: int) -> int:
    raise AssertionError(f"spent_since({since}) called although no window has a ceiling")


def limits(
    *,
    per_transaction: int | None = None,
    per_day: int | None = None,
    per_week: int | None = None,
    review_threshold: int | None = None,
) -> EffectiveLimits:
    return EffectiveLimits(
        per_transaction=per_transaction,
        per_day=per_day,
        per_week=per_week,
        review_threshold=review_threshold,
    )


def refusal(
    lim: EffectiveLimits, amount: int, currency: Currency, spent: Spent | None = None
) -> PayoutLimitExceededError:
    with pytest.raises(PayoutLimitExceededError) as caught:
        check_limits(lim, amount, currency, now=NOW, spent_since=spent if spent is not None else never)
    return caught.value


def merchant(*, payouts_enabled: bool = True) -> Merchant:
    return Merchant(
        id="mer_1",
        name="Shop",
        settlement_currency="XAF",
        status=MerchantStatus.APPROVED,
        collect_fee_ppm=15_000,
        payouts_enabled=payouts_enabled,
        blocked_providers=frozenset(),
        created_at=0,
    )


# --- constants ------------------------------------------------------------------------------------


def test_windows_are_a_day_and_a_week_in_milliseconds() -> None:
    assert DAY_MS == 24 * 60 * 60 * 1000
    assert WEEK_MS == 7 * 24 * 60 * 60 * 1000


def test_reasons_are_the_ones_merchants_see() -> None:
    assert REVIEW_REASON == "Held for review: the amount is above the review threshold."
    assert REJECTED_REASON == "Declined during review; the money is back in the balance."
    assert REJECTED_REASON is models.REJECTED_REASON


def test_all_names_the_public_policy() -> None:
    assert sorted(_policy.__all__) == sorted(
        [
            "DAY_MS",
            "WEEK_MS",
            "REVIEW_REASON",
            "REJECTED_REASON",
            "BlockedBy",
            "EffectiveLimits",
            "blocked_by",
            "check_limits",
            "effective_limits",
            "held_for_review",
        ]
    )
    for name in _policy.__all__:
        assert hasattr(_policy, name)


# --- effective limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("currency", [XAF, GHS], ids=lambda c: c.code)
def test_no_limits_record_means_only_the_currency_maximum(currency: Currency) -> None:
    assert effective_limits(None, currency.max_minor) == limits(per_transaction=currency.max_minor)


def test_unset_per_transaction_defaults_to_the_currency_maximum() -> None:
    record = PayoutLimits("mer_1", "XAF", per_day=70_000, per_week=300_000, review_threshold=40_000)
    assert effective_limits(record, XAF.max_minor) == limits(
        per_transaction=XAF.max_minor, per_day=70_000, per_week=300_000, review_threshold=40_000
    )


def test_a_set_per_transaction_ceiling_is_kept() -> None:
    record = PayoutLimits("mer_1", "XAF", per_transaction=25_000)
    assert effective_limits(record, XAF.max_minor) == limits(per_transaction=25_000)


def test_the_default_ceiling_refuses_one_unit_over_the_currency_maximum() -> None:
    lim = effective_limits(None, XAF.max_minor)
    check_limits(lim, XAF.max_minor, XAF, now=NOW, spent_since=never)
    assert refusal(lim, XAF.max_minor + 1, XAF).details == {
        "limit": "perTransaction",
        "ceiling": Decimal(XAF.max_minor),
        "currency": "XAF",
    }


# --- per-payout ceiling ---------------------------------------------------------------------------


def test_per_transaction_allows_exactly_the_ceiling_without_asking_for_spend() -> None:
    check_limits(limits(per_transaction=50_000), 50_000, XAF, now=NOW, spent_since=never)


def test_per_transaction_refuses_one_unit_over() -> None:
    error = refusal(limits(per_transaction=50_000), 50_001, XAF)
    assert error.code == "PAYOUT_LIMIT_EXCEEDED"
    assert error.param == "amount"
    assert error.message == "This payout is over the per-payout ceiling of 50000 XAF."
    assert error.details == {"limit": "perTransaction", "ceiling": Decimal(50_000), "currency": "XAF"}


def test_per_transaction_shows_the_currency_decimals() -> None:
    error = refusal(limits(per_transaction=1_250), 1_251, GHS)
    assert error.message == "This payout is over the per-payout ceiling of 12.50 GHS."
    assert error.details is not None
    ceiling = error.details["ceiling"]
    assert isinstance(ceiling, Decimal) and str(ceiling) == "12.50"


def test_per_transaction_is_checked_before_the_windows() -> None:
    spent = Spent(0)
    error = refusal(limits(per_transaction=100, per_day=1_000, per_week=1_000), 101, XAF, spent)
    assert error.details is not None and error.details["limit"] == "perTransaction"
    assert spent.calls == []


# --- rolling windows ------------------------------------------------------------------------------


def test_per_day_allows_reaching_the_ceiling_exactly() -> None:
    spent = Spent(30_000)
    check_limits(limits(per_day=100_000), 70_000, XAF, now=NOW, spent_since=spent)
    assert spent.calls == [NOW - DAY_MS]


def test_per_day_refuses_one_unit_over_with_spent_and_remaining() -> None:
    spent = Spent(30_000)
    error = refusal(limits(per_day=100_000), 70_001, XAF, spent)
    assert spent.calls == [NOW - DAY_MS]
    assert error.param == "amount"
    assert error.message == "This payout is over the rolling 24-hour ceiling of 100000 XAF."
    assert error.details == {
        "limit": "perDay",
        "ceiling": Decimal(100_000),
        "currency": "XAF",
        "spent": Decimal(30_000),
        "remaining": Decimal(70_000),
    }


def test_per_week_allows_reaching_the_ceiling_exactly() -> None:
    spent = Spent(250_000)
    check_limits(limits(per_week=300_000), 50_000, XAF, now=NOW, spent_since=spent)
    assert spent.calls == [NOW - WEEK_MS]


def test_per_week_refuses_one_unit_over_with_spent_and_remaining() -> None:
    spent = Spent(250_000)
    error = refusal(limits(per_week=300_000), 50_001, XAF, spent)
    assert spent.calls == [NOW - WEEK_MS]
    assert error.message == "This payout is over the rolling 7-day ceiling of 300000 XAF."
    assert error.details == {
        "limit": "perWeek",
        "ceiling": Decimal(300_000),
        "currency": "XAF",
        "spent": Decimal(250_000),
        "remaining": Decimal(50_000),
    }


def test_remaining_never_goes_below_zero() -> None:
    error = refusal(limits(per_day=1_000), 100, XAF, Spent(1_500))
    assert error.details is not None
    assert error.details["spent"] == Decimal(1_500)
    assert error.details["remaining"] == Decimal(0)


def test_window_details_show_the_currency_decimals() -> None:
    error = refusal(limits(per_week=10_000), 2_001, GHS, Spent(8_000))
    assert error.message == "This payout is over the rolling 7-day ceiling of 100.00 GHS."
    assert error.details is not None
    assert [str(error.details[k]) for k in ("ceiling", "spent", "remaining")] == ["100.00", "80.00", "20.00"]


def test_day_is_checked_before_week() -> None:
    spent = Spent(900)
    error = refusal(limits(per_day=1_000, per_week=1_000), 101, XAF, spent)
    assert error.details is not None and error.details["limit"] == "perDay"
    assert spent.calls == [NOW - DAY_MS]


def test_week_is_checked_when_the_day_passes() -> None:
    spent = Spent(900)
    error = refusal(limits(per_day=2_000, per_week=1_000), 101, XAF, spent)
    assert error.details is not None and error.details["limit"] == "perWeek"
    assert spent.calls == [NOW - DAY_MS, NOW - WEEK_MS]


def test_spend_is_not_asked_for_a_window_without_a_ceiling() -> None:
    day_only = Spent(0)
    check_limits(limits(per_day=1_000), 1_000, XAF, now=NOW, spent_since=day_only)
    assert day_only.calls == [NOW - DAY_MS]
    week_only = Spent(0)
    check_limits(limits(per_week=1_000), 1_000, XAF, now=NOW, spent_since=week_only)
    assert week_only.calls == [NOW - WEEK_MS]
    check_limits(limits(), XAF.max_minor * 10, XAF, now=NOW, spent_since=never)


# --- review hold ----------------------------------------------------------------------------------


def test_no_threshold_holds_nothing() -> None:
    assert not held_for_review(limits(), XAF.max_minor)


def test_review_holds_strictly_above_the_threshold() -> None:
    lim = limits(review_threshold=40_000)
    assert not held_for_review(lim, 39_999)
    assert not held_for_review(lim, 40_000)
    assert held_for_review(lim, 40_001)


def test_a_zero_threshold_holds_every_payout() -> None:
    assert held_for_review(limits(review_threshold=0), 1)


# --- blocks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("platform", [True, False])
@pytest.mark.parametrize("account", [True, False])
@pytest.mark.parametrize("closed", [True, False])
def test_blocked_by_precedence(platform: bool, account: bool, closed: bool) -> None:
    settings = Settings(payouts_enabled=platform, closed_currencies=frozenset({"XAF"} if closed else {"GHS"}))
    expected: BlockedBy | None
    if not platform:
        expected = BlockedBy.PLATFORM
    elif not account:
        expected = BlockedBy.ACCOUNT_DISABLED
    elif closed:
        expected = BlockedBy.CURRENCY_CLOSED
    else:
        expected = None
    assert blocked_by(settings, merchant(payouts_enabled=account), "XAF") is expected


def test_only_the_requested_currency_being_closed_blocks() -> None:
    settings = Settings(closed_currencies=frozenset({"GHS"}))
    assert blocked_by(settings, merchant(), "GHS") is BlockedBy.CURRENCY_CLOSED
    assert blocked_by(settings, merchant(), "XAF") is None


def test_blocked_by_values_are_their_names() -> None:
    assert [(b.name, b.value) for b in BlockedBy] == [
        ("PLATFORM", "PLATFORM"),
        ("ACCOUNT_DISABLED", "ACCOUNT_DISABLED"),
        ("CURRENCY_CLOSED", "CURRENCY_CLOSED"),
    ]


@pytest.mark.parametrize(
    ("blocked", "message"),
    [
        (BlockedBy.PLATFORM, "Payouts are switched off platform-wide."),
        (BlockedBy.ACCOUNT_DISABLED, "Payouts are disabled for this account."),
        (BlockedBy.CURRENCY_CLOSED, "Payouts in KES are closed."),
    ],
)
def test_blocked_messages(blocked: BlockedBy, message: str) -> None:
    assert blocked.message("KES") == message
