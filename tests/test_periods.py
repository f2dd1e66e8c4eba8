from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from memstack.text.periods import named_period

# A Friday.
NOW = datetime(2024, 3, 15, 12, tzinfo=UTC)


def _days(query: str, now: datetime = NOW) -> tuple[date, date] | None:
    period = named_period(query, now)
    if period is None:
        return None
    tz = now.tzinfo
    return (
        datetime.fromtimestamp(period.start, tz).date(),
        datetime.fromtimestamp(period.end, tz).date(),
    )


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did we discuss on 11 December, 2023?", date(2023, 12, 11), date(2023, 12, 12)),
        ("What event is planned for May 25, 2023?", date(2023, 5, 25), date(2023, 5, 26)),
        ("the meeting on the 5th of June", date(2023, 6, 5), date(2023, 6, 6)),
        ("notes from 2023-12-01", date(2023, 12, 1), date(2023, 12, 2)),
        ("What happened on March 3?", date(2024, 3, 3), date(2024, 3, 4)),  # this year
        ("What happened on March 20?", date(2023, 3, 20), date(2023, 3, 21)),  # not future
        ("What did John share in January 2024?", date(2024, 1, 1), date(2024, 2, 1)),
        ("What did I cook in May?", date(2023, 5, 1), date(2023, 6, 1)),
        ("What did I do in March?", date(2024, 3, 1), date(2024, 4, 1)),
        ("What did he win in 2023?", date(2023, 1, 1), date(2024, 1, 1)),
        ("An impossible 30 February 2023", date(2023, 2, 1), date(2023, 3, 1)),
        ("What did I say yesterday?", date(2024, 3, 14), date(2024, 3, 15)),
        ("the day before yesterday", date(2024, 3, 13), date(2024, 3, 14)),
        ("What did I say 3 days ago?", date(2024, 3, 12), date(2024, 3, 13)),
        ("plans from last week", date(2024, 3, 4), date(2024, 3, 11)),  # Monday to Monday
        ("this month's bills", date(2024, 3, 1), date(2024, 4, 1)),
        ("last month", date(2024, 2, 1), date(2024, 3, 1)),
        ("last year", date(2023, 1, 1), date(2024, 1, 1)),
        ("我昨天说了什么？", date(2024, 3, 14), date(2024, 3, 15)),
        ("上周的计划", date(2024, 3, 4), date(2024, 3, 11)),
        ("2023年5月我去了哪里", date(2023, 5, 1), date(2023, 6, 1)),
        ("5月3日的会议", date(2023, 5, 3), date(2023, 5, 4)),
        ("2023年12月11日聊了什么", date(2023, 12, 11), date(2023, 12, 12)),
        ("去年的预算", date(2023, 1, 1), date(2024, 1, 1)),
        ("三天前 and 3天前", date(2024, 3, 12), date(2024, 3, 13)),
    ],
)
def test_named_periods(query: str, start: date, end: date) -> None:
    assert _days(query) == (start, end)


@pytest.mark.parametrize(
    "query",
    [
        "What is my budget?",
        "May I ask you something?",
        "I may 5 times have said it",
        "we march 20 miles a day",
        "John scored 40 points",
        "他预算五千",
        "When did Caroline go to the support group?",  # asks when; names no period
    ],
)
def test_no_period(query: str) -> None:
    assert named_period(query, NOW) is None


def test_days_are_read_in_now_s_time_zone() -> None:
    shanghai = timezone(timedelta(hours=8))
    period = named_period("昨天", NOW.astimezone(shanghai))  # 20:00 on the 15th there
    assert period is not None
    assert period.start == datetime(2024, 3, 14, tzinfo=shanghai).timestamp()
    assert period.end - period.start == 86400
    assert period.contains(datetime(2024, 3, 14, 23, tzinfo=shanghai).timestamp())
    assert not period.contains(datetime(2024, 3, 15, 0, 30, tzinfo=shanghai).timestamp())
    assert period.contains(datetime(2024, 3, 15, 0, 30, tzinfo=shanghai).timestamp(), 3600)
