"""Money in facts: the currencies memstack knows by name, and a budget's one shape.

A budget is ``{"amount": <number>, "currency": <ISO 4217 code>}`` whatever way it was
written; :func:`normalise_money` reads the ways, and :data:`CURRENCY_WORDS` maps the
words, symbols and codes of some sixty currencies in both languages to their codes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from memstack.core.facts.numbers import NUMBER_PATTERN, parse_number, tidy_number

# Spellings of each currency, "|"-separated (some are several words). Longer spellings
# win ("singapore dollars" over "dollars"); a bare "$" is USD.
_CURRENCY_SPELLINGS = {
    "CNY": "人民币|块钱|元|块|rmb|cny|yuan|kuai|¥|￥",
    "USD": "美元|美金|刀|us$|usd|dollars|dollar|bucks|us dollars|$",
    "EUR": "欧元|欧|eur|euros|euro|€",
    "GBP": "英镑|镑|gbp|pounds|quid|£",
    "JPY": "日元|jpy|yen|円",
    "HKD": "港币|港元|hkd|hk$|hk dollars|hong kong dollars",
    "MOP": "澳门元|澳门币|mop|mop$|patacas|pataca",
    "INR": "卢比|inr|rupees|rupee|rs|₹",
    "PKR": "pkr|pakistani rupees",
    "LKR": "lkr|sri lankan rupees",
    "NPR": "npr|nepali rupees|nepalese rupees",
    "CAD": "加元|加币|cad|c$|ca$|canadian dollars",
    "AUD": "澳元|澳币|aud|a$|au$|aussie dollars|australian dollars",
    "NZD": "新西兰元|纽币|nzd|nz$|kiwi dollars|new zealand dollars",
    "SGD": "新加坡元|新币|sgd|s$|sing dollars|singapore dollars",
    "TWD": "新台币|台币|twd|nt$|taiwan dollars",
    "NAD": "纳米比亚元|nad|n$|namibian dollars",
    "KRW": "韩元|韩币|krw|won|₩",
    "CHF": "瑞士法郎|瑞郎|chf|swiss francs",
    "THB": "泰铢|thb|baht|฿",
    "MYR": "马币|令吉|林吉特|myr|ringgit|rm",
    "IDR": "印尼盾|idr|rupiah|rp",
    "VND": "越南盾|vnd|₫",
    "PHP": "菲律宾比索|php|philippine pesos|₱",
    "MXN": "墨西哥比索|mxn|mex$|mexican pesos",
    "COP": "哥伦比亚比索|cop|colombian pesos",
    "ARS": "阿根廷比索|ars|argentine pesos",
    "CLP": "智利比索|clp|chilean pesos",
    "PEN": "索尔|秘鲁索尔|pen|soles|s/",
    "BRL": "巴西雷亚尔|雷亚尔|brl|reais|r$",
    "RUB": "卢布|rub|rubles|roubles|₽",
    "UAH": "格里夫纳|uah|hryvnia|hryvnias|₴",
    "KZT": "坚戈|kzt|tenge|₸",
    "MNT": "图格里克|mnt|tugrik|tugriks|₮",
    "GEL": "拉里|gel|lari|₾",
    "TRY": "土耳其里拉|里拉|try|lira|liras|tl|₺",
    "PLN": "波兰兹罗提|兹罗提|pln|zł|zloty|złoty|zlotys",
    "RON": "罗马尼亚列伊|列伊|ron|lei",
    "BGN": "保加利亚列弗|列弗|bgn|leva",
    "CZK": "捷克克朗|czk|kč|czech crowns|koruna",
    "HUF": "福林|huf|forint|forints|ft",
    "SEK": "瑞典克朗|sek|swedish kronor|swedish krona",
    "NOK": "挪威克朗|nok|norwegian kroner|norwegian krone",
    "DKK": "丹麦克朗|dkk|danish kroner|danish krone",
    "ISK": "冰岛克朗|isk|icelandic kronur",
    "ZAR": "南非兰特|兰特|zar|rand",
    "KES": "肯尼亚先令|kes|ksh|kenyan shillings",
    "TZS": "坦桑尼亚先令|tzs|tanzanian shillings",
    "UGX": "乌干达先令|ugx|ugandan shillings",
    "ETB": "埃塞俄比亚比尔|etb|birr",
    "NGN": "奈拉|ngn|naira|₦",
    "GHS": "塞地|ghs|cedis|cedi|₵",
    "EGP": "埃及镑|egp|egyptian pounds",
    "MAD": "迪拉姆|mad|moroccan dirhams",
    "AED": "阿联酋迪拉姆|aed|dirhams|dirham|dhs",
    "SAR": "沙特里亚尔|sar|saudi riyals",
    "QAR": "卡塔尔里亚尔|qar|qatari riyals",
    "ILS": "谢克尔|ils|shekels|shekel|₪",
    "JOD": "约旦第纳尔|jod|jordanian dinars",
    "BDT": "塔卡|bdt|taka|৳",
    "MMK": "缅元|mmk|kyat",
    "KHR": "瑞尔|khr|riel",
    "LAK": "基普|lak",
}
# Money words that name no one currency ("200 pesos" may be Mexican or Philippine): an
# amount in one of them is no budget memstack can state.
AMBIGUOUS_CURRENCY = (
    "比索|克朗|法郎|第纳尔|里亚尔|先令|(?i:pesos?|kr|kronor|kroner|krona|krone|francs?|dinars?|riyals?|rials?"
    "|shillings?)"
)
# Longest spellings first so "US$" wins over "$" and "块钱" over "块".
CURRENCY_WORDS: tuple[tuple[str, str], ...] = tuple(
    sorted(
        ((word, code) for code, words in _CURRENCY_SPELLINGS.items() for word in words.split("|")),
        key=lambda pair: -len(pair[0]),
    )
)
_CURRENCY_CODES = {code for _, code in CURRENCY_WORDS}


def currency_code(word: str) -> str | None:
    """元/块/RMB/¥ → CNY, $/USD/dollars → USD, €/EUR → EUR ...; None if unknown."""
    w = word.strip().casefold()
    if w.upper() in _CURRENCY_CODES:
        return w.upper()
    for spelling, code in CURRENCY_WORDS:
        if w == spelling:
            return code
    return None


def find_currency(text: str) -> str | None:
    """The first currency named anywhere in ``text``."""
    low = text.casefold()
    best: tuple[int, str] | None = None
    for spelling, code in CURRENCY_WORDS:
        pattern = re.escape(spelling)
        if spelling.isascii() and spelling.isalpha():
            pattern = rf"(?<![a-z]){pattern}(?![a-z'’])"
        m = re.search(pattern, low)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), code)
    return best[1] if best else None


def has_han(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None


def default_currency(text: str) -> str:
    """CNY for Chinese text, USD otherwise, when nobody named a currency."""
    return "CNY" if has_han(text) else "USD"


def normalise_money(
    value: Any, *, default_currency: str = "CNY", _depth: int = 0
) -> dict[str, Any]:
    """Any budget as written → ``{"amount": 8000, "currency": "CNY"}``.

    Accepts a number, a string ("8000元", "¥8,000", "八千"), or a mapping with
    amount/value/max/limit and currency. A range (min/max, "5000-8000") keeps its upper
    bound: the limit is the most the user will spend.
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not an amount")
    if isinstance(value, int | float):
        try:
            amount = float(value)
        except OverflowError:  # an integer beyond any float
            raise ValueError("an amount too large to read") from None
        if not math.isfinite(amount):
            raise ValueError(f"{value!r} is not an amount")
        return {"amount": tidy_number(amount), "currency": default_currency}
    if isinstance(value, Mapping):
        if _depth >= 4:
            raise ValueError("an amount nested in more than four mappings")
        cur = value.get("currency")
        code = currency_code(str(cur)) if isinstance(cur, str | int | float) and cur else None
        for field in ("amount", "max", "limit", "upper", "value", "to"):
            if value.get(field) is not None:
                inner = normalise_money(
                    value[field], default_currency=code or default_currency, _depth=_depth + 1
                )
                return {"amount": inner["amount"], "currency": code or inner["currency"]}
        raise ValueError(f"no amount in a mapping of {len(value)} keys")
    if isinstance(value, str):
        code = find_currency(value) or default_currency
        numbers = [
            n for tok in re.findall(NUMBER_PATTERN, value) if (n := parse_number(tok)) is not None
        ]
        if not numbers:
            raise ValueError(f"no amount in {value!r}")
        return {"amount": tidy_number(max(numbers)), "currency": code}
    raise ValueError(f"cannot read an amount from {type(value).__name__}")
