"""Where the user lives, from the frames people use to say it, in both languages.

The city rules of :mod:`.zh` and :mod:`.en` read the common verbs ("住在", "I live in",
"moved to"); chat says it in many more ways: "我在大连", "住沈阳", "家在肇东", "还窝在保
定", "在里昂待了六年", "I'm in Lille", "stuck in Reno", "been in Halifax for 5 years".
A frame is a residence word before a place (or a stay after it); the place is a city
the gazetteer knows, a word jieba tags as a place, or a capitalised name. Clauses about
trips, origins, the past and moves to come are hidden before this reads (:mod:`.scope`),
so "这周在呼和浩特出差" and "grew up in Leeds" give nothing. Being less certain than
the rules, a frame's city carries a lower confidence.
"""

from __future__ import annotations

import re

from memstack.core.facts.fact import Fact
from memstack.ingest.extraction.rules.en import PLACE, proper_name
from memstack.ingest.extraction.rules.lexicon import DEPARTMENTS_EN
from memstack.ingest.extraction.rules.sentences import other_subject
from memstack.ingest.extraction.rules.zh_words import place

FRAME_CONFIDENCE = 0.75

_WHO_ZH = (
    r"(?:^|(?<=[，,\s…]))(?:(?:不过|但是?|可是|其实|反正|说正事|现实是|可惜)[，,]?)*"
    r"(?:我|咱|俺)?(?:们|家|自己|本人)?"
)
_WHEN_ZH = r"(?:现在|目前|如今|平时|一直|常年|已经|也|还|就|都|刚|才|暂时|依然|仍然)*"
# A residence word that only takes a place after it.
_HOME_ZH = re.compile(
    _WHO_ZH + _WHEN_ZH + r"(?:住在|住|家在|人在|待在|呆在|窝在|蜗居在?|生活在|定居在?|落户在?"
    r"|安家在?|扎根在?|base在|坐标|搬到了?|搬去了?|搬来了?|搬回了?|搬家到|迁到|回到了?"
    # "和老公还有儿子住在喀什": the user with others, at home
    r"|(?:和|跟)[^，,。]{1,8}?住在|来(?=[^，,。]{2,8}?[一二两三四五六七八九十几半\d]+(?:个)?多?(?:月|年)了))\s*"
)
# "我在大连", "在卡托维兹待了五年": 在 takes anything, so the place must be one, and the
# clause must not be about doing something there for a while.
_AT_ZH = re.compile(_WHO_ZH + _WHEN_ZH + r"在\s*")
_STAY_AFTER_ZH = re.compile(
    r"^(?:待|呆|住|生活|定居|工作|上班|读书|上学|读研|读博|念书|租房|打工|安家|扎根|一个人|长住"
    r"|总部|分部|分公司|公司|这边|那边|本地)"
    r"|^(?:[，,。！!…~～\s]|$)"
)
_STAYED_ZH = re.compile(
    r"(?:待|呆|住|生活|定居|工作|上班|读书|读研|读博|念书|留学|安家)|[，,]\s*(?:做|当|干|在)"
)
_HOME_EN = re.compile(
    r"(?i:\b(?:I(?:'m|\s+am)|we(?:'re|\s+are))\s+(?:currently\s+|now\s+|still\s+|actually\s+)?(?:in|stuck\s+in"
    r"|based\s+out\s+of|located\s+in|settled\s+in)"
    r"|\b(?:live|living|based|settled|stuck|stationed|located|residing)\s+(?:in|out\s+of)"
    r"|\b(?:home|home\s+base)\s+(?:is|these\s+days\s+is)\s+(?:in\s+)?"
    r"|\b(?:been|lived|living)\s+in(?=\s+\S+(?:\s+\S+)?\s+for\s+(?:\w+\s+)?(?:years?|months)\b)"
    r"|\bmoved\s+(?:back\s+|over\s+|up\s+|down\s+)?(?:to|into)"
    r"|\b(?:bought|rent(?:ed)?|renting|own)\s+(?:a|an|our|my)\s+(?:\w+\s+)?(?:house|flat|apartment|condo"
    r"|place|home)\s+in"
    r"|\b(?:my|our|the\s+new)\s+(?:\w+\s+)?(?:place|flat|apartment|condo|house|home)\s+in"
    # "I'm still here in Nairobi", "cooking for the kids here in Kaduna"
    r"|\bhere\s+in"
    r"|(?P<household>\bwith\s+(?:me|us)\s+in))"
    rf"\s+(?P<v>{PLACE})"
)
_NOT_A_PLACE_EN = re.compile(
    r"^(?i:the|a|an|my|our|this|that|love|charge|trouble|town|bed|shape|line|time|school|college"
    r"|class|office|hospital|touch|luck|debt|pain|favor|favour|between|here|there|it|one|two)$"
    rf"|^(?:{DEPARTMENTS_EN})$"
)


def _zh(view: str) -> str | None:
    found: str | None = None
    for pattern, strict in ((_HOME_ZH, False), (_AT_ZH, True)):
        for m in pattern.finditer(view):
            if other_subject(view[m.start() : m.start() + 12]):
                continue
            rest = view[m.end() :]
            city = place(rest, strict=strict)
            if city is None and strict:
                # "在卡托维兹待了五年": a place jieba does not know, held by a stay verb
                loose = place(rest, strict=False)
                held = loose is not None and _STAYED_ZH.match(rest[len(loose) :])
                city = loose if held else None
            if city is None:
                continue
            after = view[m.end() + len(city) :]
            if pattern is _AT_ZH and not _STAY_AFTER_ZH.match(after.lstrip("了")):
                continue
            found = city
        if found is not None:
            return found
    return None


def _en(view: str) -> str | None:
    found: str | None = None
    for m in _HOME_EN.finditer(view):
        v = proper_name(m.group("v"))
        if v is None or _NOT_A_PLACE_EN.match(v.split()[0]):
            continue
        clause = view[max(0, view.rfind(",", 0, m.start()) + 1) : m.start() + 1]
        # "my mum lives with us in Enugu" is the user's home whoever the subject is
        if not m.group("household") and other_subject(clause.strip()):
            continue
        found = v
    return found


def residence(view: str) -> Fact | None:
    """The city ``view`` gives as where the user lives, by a residence frame; the last
    such city when there are several."""
    city = _zh(view) or _en(view)
    if city is None:
        return None
    return Fact(
        key="city", value=city, type="profile", confidence=FRAME_CONFIDENCE, source="user_stated"
    )
