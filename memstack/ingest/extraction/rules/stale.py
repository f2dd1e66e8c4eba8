"""Changes the rules notice but cannot read: the old value must not stay as if confirmed.

When a later message clearly talks about a key the user already has (its cue words: a job,
a move, a reply language, a budget) and says that something changed ("更正一下", "现在",
"now", "anymore", "officially", "stretch"), yet no rule read a new value, keeping the old
value would present a superseded fact as current. A wrong current value misleads more
than a missing one, so the key is withdrawn (``retracts=True``) and the next clear
statement sets it again. A reply language named after a correction is read outright: the
user is naming the language they meant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from memstack.core.facts.fact import Fact
from memstack.core.facts.profile_values import item_matches
from memstack.core.facts.vocabulary import LANGUAGES, VOCABULARY
from memstack.ingest.extraction.rules.lexicon import OCCUPATION_EN
from memstack.ingest.extraction.rules.money import LOOSEN
from memstack.ingest.extraction.rules.sentences import TURN_WORDS, other_subject

# Words that say the earlier statement no longer holds.
_CHANGE = re.compile(
    r"更正|纠正|现在|如今|目前|改|换|不再|转行|辞职|跳槽|搬|已经|"
    r"(?i:\bnow\b|\banymore\b|\bany more\b|\bno longer\b|\bofficially\b|\bthese days\b"
    r"|\bswitch|\bchang|\bfrom (?:now|here) on\b|\bfrom here\b|\bstarting (?:today|now)\b"
    r"|\bwent back\b|\bgone back\b|\bagain\b)"
)
# Cue words that put a key in question; narrow on purpose ("现在工作好累", "I'm home now"
# and "my boss" talk about work or home without changing them).
_CUES: dict[str, re.Pattern[str]] = {
    "occupation": re.compile(
        r"转行|改行|辞职|辞了|辞掉|不干了|跳槽|入职|考上|上岸|现在(?:在\S{1,8}?)?(?:当|做|干)|换(?:了)?(?:份|个)?工作|新工作|开了(?:一)?[家个间]|当上|升职|不干了"
        r"|(?i:\bnew job\b|\bcareer change\b|\bquit my job\b|\bpromoted\b|\bgot hired\b"
        r"|\bbecame an?\b|\bretired\b|\bwork(?:ing)? as\b"
        rf"|\bI'?m (?:(?:now|officially|finally) )+an? (?:\w+ )?(?:{OCCUPATION_EN}))"
    ),
    "city": re.compile(
        r"搬到|搬去|搬走|搬家|搬离|定居|落户|外派|扎根|安家"
        r"|(?i:\bmov(?:e|ed|ing) (?:to|away|out|back)\b|\brelocat\w*|\bnew (?:city|town|place)\b"
        r"|\bliv(?:e|ing) in\b|\bbased in\b)"
    ),
    "budget_limit": re.compile(r"预算|(?i:\bbudget\b)"),
    # Eating meat, or everything, ends a meat-free diet ("现在啥都吃", "eating meat again");
    # checked against the known diet below, since keto or paleo eat meat.
    "diet": re.compile(
        r"啥都吃|什么都吃|都吃了|开荤|吃肉|不吃素了|破戒"
        r"|(?i:\b(?:eat|eats|eating|ate)\s+(?:meat|everything|anything)\b|\bback to meat\b)"
    ),
}
# "预算不变", "budget stays the same": the key is named to say it has not changed.
_UNCHANGED = re.compile(
    r"不变|照旧|不改|没变|还是那么多|(?i:\b(?:stays?|remains?)\s+the\s+same\b|\bunchanged\b"
    r"|\bsame\s+budget\b)"
)
_MEAT_FREE = re.compile(r"素|斋|(?i:vegan|vegetarian|veggie|pesc[ae]tarian|plant)")
# A change of plan that names a new trip or purchase the rules could not read ("改主意了，
# 去…骑马", "changed my mind, heading to …"): the old goal is no longer the plan.
_PLAN_CHANGE = re.compile(
    r"改主意|变卦|计划有变"
    r"|(?i:\bchanged? (?:my|our) minds?\b|\bchange of plans?\b|\bplans? changed\b)"
)
_PLAN_CUE = re.compile(r"去|买|(?i:\bgo(?:ing)?\b|\bbuy|\bhead|\btrip\b|\bvisit)")
# The goal is dropped: "跑步机不买了", "the blender's out", "dash cam sorted". Read only
# right after the goal's own name, so "手机壳买到了" does not drop the goal 手机.
_DROPPED = (
    r"(?:s|es)?(?:'s|\s|就|也|先|暂时|已经|我|了|，|,)*"
    # "先不急", "先放放": put off, so no longer what the user is shopping for now
    r"(?:不买了|不打算买了|不想买了|不要了|不需要了|不用买了|买好了|买到了|搞定了|不急|放放|缓缓"
    r"|(?i:is out\b|out\b|sorted\b|done\b|not happening\b|off the (?:list|table)\b"
    r"|on hold\b|can wait\b))"
)
# ... or dropped by a verb before its name: "forget the kayak", "算了，跑步机".
_DROP_BEFORE = (
    r"(?:(?i:\b(?:forget|skip|scratch|drop|never ?mind|nvm)\s+(?:about\s+)?"
    r"(?:the\s+|that\s+|my\s+)?)"
    r"|(?:不考虑|放弃|不看)了?)"
)
# The likes on record withdrawn without naming them: "i'm so over them", "都不喜欢了".
_OVER_IT = re.compile(
    r"(?i:\bI'?m\s+(?:so\s+|totally\s+|kinda\s+)?over\s+(?:it|them|that)\b"
    r"|\bnot\s+into\s+(?:it|them|that)\s+(?:anymore|any more)\b)|都不喜欢了|不感兴趣了"
)
# "打错了，是保加利亚语": a correction names the language the user meant.
_MISTYPED = re.compile(r"[打写说]错了|(?i:\btypo\b|\bI meant\b)")
_LANGUAGE_WORDS = sorted(LANGUAGES, key=len, reverse=True)
_LANGUAGE_NAME = re.compile(
    "|".join(re.escape(w) if not w.isascii() else rf"\b{re.escape(w)}\b" for w in _LANGUAGE_WORDS),
    re.IGNORECASE,
)
# Words that tie a named language to how the user wants replies, not to something else
# they do in it ("learning Spanish", "a French film").
_REPLY_WORDS = re.compile(
    r"回复|回答|回我|用|说|聊|(?i:\brepl|\bans|\brespond|\bwrite|\btalk|\bmeant\b"
    r"|\bfrom (?:now|here)|\bplease\b|\bpls\b)"
)


def stale_facts(text: str, known: Mapping[str, Any], found: Iterable[str]) -> list[Fact]:
    """Facts that end (or, for the reply language, replace) known values this message
    changes without the rules having read the change."""
    said = set(found)
    out: list[Fact] = []
    if "language" in known and "language" not in said:
        language = _language_change(text, known["language"])
        if language is not None:
            out.append(language)
    goal = known.get("goal")
    dropped = isinstance(goal, str) and (
        re.search(re.escape(goal) + _DROPPED, text, re.I)
        or re.search(_DROP_BEFORE + re.escape(goal), text, re.I)
    )
    replanned = _PLAN_CHANGE.search(text) and _PLAN_CUE.search(text)
    if goal and (dropped or replanned) and "goal" not in said:
        out.append(_retraction("goal"))
    out += _dropped_items(text, known, said)
    gone = _pets_gone(text, known.get("pets"))
    if gone and "pets" not in said:
        out.append(_retraction("pets").model_copy(update={"value": gone}))
    over = "likes" in known and "likes" not in said and _OVER_IT.search(text)
    if over:
        out.append(_retraction("likes"))
    loosened = "budget_limit" in known and LOOSEN.search(text) is not None
    if loosened and "budget_limit" not in said:
        out.append(_retraction("budget_limit"))
    if not _CHANGE.search(text) and not TURN_WORDS.search(text):
        return out
    for key, cue in _CUES.items():
        if (
            key in known
            and key not in said
            and cue.search(text)
            and not _UNCHANGED.search(text)
            and (key != "diet" or _MEAT_FREE.search(str(known[key])))
            and key not in {f.key for f in out}
        ):
            out.append(_retraction(key))
    return out


# A named pet that died or left, said by its name: "灰灰上个月走了", "Noodle went to live
# with my cousin".
_PET_GONE = (
    r"[^，,。.!?！？]{0,12}?(?:去世|死|走|没|送人|病逝|离开)了"
    r"|(?i:[^,.!?]{0,20}?\b(?:passed away|died|was put down|went to live with|was rehomed"
    r"|got rehomed|ran away|is gone)\b)"
)


# ... or with the verb before the name: "had to put Nutmeg down", "把豆芽送人了".
_PET_GONE_BEFORE = (
    r"(?i:\bput\s+NAME\s+(?:down|to sleep)\b|\b(?:lost|buried|rehomed|gave away|rip)\s+NAME\b)"
    r"|把NAME(?:送人|送走|送给)"
)


# The only pet gone, without its name: "前天开窗没注意飞走了", "she ran away last night".
_ONLY_PET_GONE = re.compile(
    r"飞走了|跑丢了|走丢了|跑掉了|丢了|回不来了|去世了|病逝了|离开我们了|当天使了|去喵星了|去汪星了"
    r"|(?i:(?:passed\s+away|passed\s+on|died|ran\s+away|flew\s+away|went\s+missing|got\s+out"
    r"\s+and\s+never\s+came\s+back|crossed\s+the\s+rainbow\s+bridge|was\s+put\s+(?:down|to\s+sleep))\b)"
)


# An item struck off a list the user has: "scratch the running", "去掉跑步".
_DROP_ITEM = re.compile(
    r"(?i:\b(?:scratch|scrap|strike|drop|forget|cross\s+off|take\s+off|remove|minus)\s+(?:the\s+)?"
    r"(?P<v>[a-z][\w-]*(?:\s+[\w-]+){0,2}?)(?=\s*(?:[,.;!]|$|\s+(?:bit|part|one|thing|too)\b)))"
    r"|(?:去掉|划掉|删掉|删了)(?P<v2>[\u4e00-\u9fff]{1,8}?)(?=$|[，,。！!]|吧|了)"
    r"|(?:^|(?<=[，,。]))(?:把)?(?P<v3>[\u4e00-\u9fff]{1,8}?)(?:从[^，,。]{1,8}?)?(?:去掉|划掉|删掉|拿掉)"
)


def _dropped_items(text: str, known: Mapping[str, Any], said: set[str]) -> list[Fact]:
    out: list[Fact] = []
    for m in _DROP_ITEM.finditer(text):
        item = m.group("v") or m.group("v2") or m.group("v3")
        for key, value in known.items():
            spec = VOCABULARY.get(key)
            if key in said or spec is None or spec.kind != "list" or not isinstance(value, list):
                continue
            if any(item_matches(str(v), item) for v in value):
                out.append(
                    _retraction(key).model_copy(update={"value": [item], "confidence": 0.75})
                )
    return out


def _only_pet_gone(text: str) -> bool:
    for m in _ONLY_PET_GONE.finditer(text):
        start = max(text.rfind(c, 0, m.start()) for c in "，,。.!！?？;；\n") + 1
        if not other_subject(text[start : m.start()].strip()):
            return True
    return False


def _pets_gone(text: str, pets: Any) -> list[str]:
    if not isinstance(pets, list):
        return []
    if len(pets) == 1 and _only_pet_gone(text):
        return [str(pets[0])]
    gone = []
    for item in pets:
        name = re.escape(str(item).partition(": ")[2])
        if name and (
            re.search(name + f"(?:{_PET_GONE})", text, re.IGNORECASE)
            or re.search(_PET_GONE_BEFORE.replace("NAME", name), text, re.IGNORECASE)
        ):
            gone.append(str(item))
    return gone


def _language_change(text: str, current: Any) -> Fact | None:
    """The reply language a corrected request names."""
    if not (_CHANGE.search(text) or TURN_WORDS.search(text)):
        return None
    named = [LANGUAGES[m.group().casefold()] for m in _LANGUAGE_NAME.finditer(text)]
    others = list(dict.fromkeys(code for code in named if code != current))
    if not others:
        return None
    if not (_REPLY_WORDS.search(text) or _MISTYPED.search(text)):
        return None  # "I'm learning Korean now": a language, but not how to reply
    # "I know I asked for Portuguese, but plain English from here": the last one named.
    return Fact(
        key="language",
        value=others[-1],
        type=VOCABULARY["language"].type,
        confidence=0.7,
        source="user_stated",
        override=True,
    )


def _retraction(key: str) -> Fact:
    return Fact(
        key=key,
        value=None,
        type=VOCABULARY[key].type,
        confidence=0.6,
        source="user_stated",
        retracts=True,
    )
