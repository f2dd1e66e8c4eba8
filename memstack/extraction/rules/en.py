"""English rules for text-valued and list-valued keys.

English marks the subject, so most rules anchor on "I"/"my"; a few also accept the
subjectless fragments of chat ("finally moved to Leeds", "Looking for a tent", "Pescatarian.")
at the start of a sentence or clause, where the speaker can only be the user.
"""

from __future__ import annotations

import re

from memstack.extraction.rules.engine import NICKNAME, SWITCHED_GOAL, WEAK_GOAL, Rule, cut, rule
from memstack.extraction.rules.lexicon import (
    DIETS_EN,
    KIN_EN,
    NOT_NAMES,
    OCCUPATION_EN,
    OTHERS_EN,
)
from memstack.extraction.vocabulary import LANGUAGES

_LANG = "|".join(sorted((w for w in LANGUAGES if w.isascii() and len(w) > 3), key=len)[::-1])
# Latin-1 letters too: "Tomás", "Zoë", "Óscar".
NAME = r"[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ]+(?:[-'][A-ZÀ-ÖØ-Þ]?[a-zß-öø-ÿ]+)?"
_PLACE = r"[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,2}"
_PHRASE = r"[A-Za-z][\w-]*(?:\s+[\w-]+){0,3}?"
_PHRASE_END = r"(?=$|[,.;!?]|\s+(?:at|in|for|and|but|with|since|from|now)\b)"
# Adverbs a subjectless chat fragment may open with ("just need a ...", "still looking for").
_ADVERB = (
    r"(?i:(?:just|really|also|still|now|currently|mostly|mainly|only|definitely|probably)\s+)?"
)
_GREETING = r"(?i:(?:hi|hey|hello|hiya|yo|morning|evening)(?:\s+there)?[,!.]*\s+)"
CLAUSE_START = r"(?:^|(?<=[,;:]\s)|(?<=[,;:]))\s*"
# Not what anyone shops for: "I need help", "I need more time".
_NOT_GOALS = re.compile(
    r"^(?i:help|advice|ideas?|suggestions?|recommendations?|more|to|it|that|this|something"
    r"|anything|someone|somebody|you|info|information|answers?)\b"
    r"|^(?i:time|money|sleep|rest|refunds?|favou?r|hand|hug|vacation|holiday|nap|drink|coffee"
    r"|break|minute|moment|second|job|space|privacy|quiet|haircut|ride|seat)$"
)
_GOAL_STOP = re.compile(
    r"[,.;!?:()\"]|\s(?i:for|under|below|around|within|with|that|which|to|so|because|but|and"
    r"|or|in|on|at|from|by|instead|anymore|please|pls|since|if|when|while|now|today|asap"
    r"|ideally|preferably|max|tops|about|like|less|more|than|this|next|before|after|lol"
    r"|though|either|too|is|are|was|were|will|would|should|can|could|has|have)\b|\s[$€£¥₹\d]"
)


# Money already spent: "I paid $500 for a bike" names no goal.
_SPENT = re.compile(r"(?i:\b(?:paid|spent|cost|costs|bought|got it|sold|was|were)\b)")


def _goal(m: re.Match[str], sentence: str) -> str | None:
    rest = sentence[m.end() :]
    rest = re.sub(r"^(?i:(?:an?|the|some|my|our|one|another)\s+)", "", rest)
    stop = _GOAL_STOP.search(rest)
    v = (rest[: stop.start()] if stop else rest).strip()
    if not v or len(v.split()) > 4 or _NOT_GOALS.search(v):
        return None
    return v


# A self-introduction: "I'm Tomas, ...", "Ben here, ...", "My name is Ana, ...".
_INTRO = re.compile(
    rf"^{_GREETING}?(?:I'm\s+{NAME}|I\s+am\s+{NAME}|{NAME}\s+here|(?i:my name is|this is)\s+{NAME})"
    r"\s*[,.!]"
)
_DIET_WORD = re.compile(rf"\b(?i:{DIETS_EN})\s+")


def introduced(sentence: str) -> bool:
    """Whether ``sentence`` opens with the user introducing themselves, so its bare
    fragments ("software engineer in Pune", "hate coriander") are about the user."""
    return _INTRO.match(sentence) is not None


def _job(m: re.Match[str], sentence: str) -> str | None:
    """An occupation; an apposition ("I'm Ben, accountant in Leeds") only in an intro."""
    if m.group("v3") and not introduced(sentence):
        return None
    v = next(g for g in (m.group("v"), m.group("v2"), m.group("v3")) if g)
    return _DIET_WORD.sub("", v).strip() or None


def _intro_fragment(m: re.Match[str], sentence: str) -> str | None:
    return cut(sentence[m.end() :]) if introduced(sentence) else None


def _name(m: re.Match[str], sentence: str) -> str | None:
    v = m.group("v")
    return None if v.split()[0].casefold() in NOT_NAMES else v


def _place(m: re.Match[str], sentence: str) -> str | None:
    v = m.group("v")
    return None if v.split()[0].casefold() in NOT_NAMES else v


_SPOUSES = ["wife", "husband", "spouse"]

# Withdrawals come first: "I don't live in X anymore" must not read as living in X.
_RETRACTIONS = (
    rule(
        "city",
        r"(?i:\bI\s+(?:don't|do not|no longer)\s+live\s+in\s+)"
        r"(?P<v>[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*)?)",
        0.85,
        statements_only=True,
        retracts=True,
    ),
    rule(
        "occupation",
        r"(?i:\bI\s+(?:just\s+)?(?:quit|lost|left)\s+my\s+job\b"
        r"|\bI\s+(?:got|was|have been|'ve been)\s+(?:laid off|fired|let go)\b"
        r"|\bI(?:'m|\s+am)\s+(?:now\s+)?(?:unemployed|out of work|between jobs)\b)",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "goal",
        r"(?i:\bI\s+(?:don't|do not)\s+need\s+(?:it|one|that)\s+(?:anymore|any more)\b"
        r"|\b(?:not|no longer)\s+(?:buying|getting|looking for)\s+(?:it|one|that)"
        r"(?:\s+(?:anymore|any more))?\b)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "family",
        r"(?i:\b(?:we|I)\s+(?:got|are|'re|am|'m)\s+(?:now\s+)?divorced\b)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: list(_SPOUSES),
    ),
    # "I don't like X anymore": X leaves the likes (and is a dislike, read by the rule below).
    rule(
        "likes",
        r"(?i:\bI\s+(?:don't|do not|no longer)\s+(?:really\s+)?(?:like|love|enjoy)\s+)"
        r"(?P<v>[^,.;!?]+?)\s+(?i:anymore|any more|any longer)\b",
        0.85,
        retracts=True,
        claims=False,
    ),
)

RULES: tuple[Rule, ...] = (
    *_RETRACTIONS,
    rule(
        "do_not_recommend",
        r"(?i:\b(?:do not|don't|dont|never|stop|quit|no more|please don't|please do not)\s+"
        r"(?:ever\s+)?(?:recommend|suggest|show|offer|pitch)(?:ing)?\s+(?:me\s+)?(?:any\s+)?(?:more\s+)?"
        r"|\b(?:please\s+)?avoid\s+(?:recommending|suggesting)\s+(?:any\s+)?)"
        # "and please, nothing from X": a brand or shop ruled out, the whole clause
        r"|(?i:(?:^|(?<=[,.]\s)|\b(?:and|so|but|just)\s+)(?:please,?\s+)?"
        r"nothing\s+(?:from|by|made by)\s+)"
        r"(?P<v>[A-Z][\w&'-]*(?:\s+[A-Z][\w&'-]*){0,2})(?=\s*(?:,|\.|!|;|$|please\b|thanks\b))",
        0.95,
        reject=re.compile(r"(?i:\bother than\b|\bexcept\b|\bbesides\b|\bapart from\b|\bbut\b)"),
    ),
    rule(
        "do_not_recommend",
        r"(?i:(?:^|(?<=,\s)|\b(?:so|and|also|plus|actually|oh|ok|okay)\s+)no\s+(?:more\s+)?(?P<v>[a-z][\w'-]*(?:\s+[\w'-]+){0,2}?)"
        r"\s*,?\s*(?:please|pls|plz|thanks|thank you|period|full stop|ever|at all)\b)",
        0.9,
        reject=re.compile(
            r"(?i:^(?:problem|worries|rush|need|thanks|idea|clue|way|pressure|hurry))"
        ),
    ),
    rule(
        "dislikes",
        r"(?i:\bI\s+(?:really\s+|just\s+|also\s+|absolutely\s+|still\s+)*"
        r"(?:(?:don't|do not|dont)\s+(?:really\s+)?(?:like|love|enjoy|want)"
        r"|hate|dislike|detest|loathe|can't stand|cannot stand|can't bear)\s+"
        r"|\bI(?:'m|\s+am)\s+not\s+(?:a\s+(?:big\s+)?fan\s+of|into)\s+)",
    ),
    rule(
        "likes",
        r"(?i:\bI\s+(?:really\s+|also\s+|do\s+|just\s+|absolutely\s+|definitely\s+|much\s+|generally\s+"
        r"|usually\s+|would\s+|still\s+)*(?:like|love|prefer|enjoy|adore)\s+(?!to\s+know|it\b|that\b)"
        r"|\bI'd\s+(?:rather\s+have|prefer)\s+|\bI(?:'m|\s+am)\s+(?:really\s+|now\s+|mostly\s+|more\s+"
        r"|much\s+more\s+|way\s+more\s+)*(?:into|a\s+(?:big\s+)?fan\s+of)\s+)",
    ),
    # The bare fragments of a self-introduction: "Ben here, 34, love hiking, hate coriander".
    rule(
        "dislikes",
        r"(?<=,\s)(?i:(?:really\s+)?(?:hate|dislike|can't stand|not a fan of))\s+",
        value=_intro_fragment,
    ),
    rule(
        "likes",
        r"(?<=,\s)(?i:(?:really\s+)?(?:love|like|enjoy|into|big fan of))\s+",
        value=_intro_fragment,
    ),
    rule(
        "focus",
        r"(?i:\bI\s+(?:really\s+|mostly\s+|mainly\s+)?care\s+"
        r"(?:(?:the\s+)?most|mostly|a lot|mainly)?\s*about\s+"
        r"|\bwhat\s+(?:matters|counts)\s+(?:most\s+)?(?:to me\s+)?(?:most\s+)?is\s+"
        r"|\bmy\s+(?:top\s+|main\s+|biggest\s+)?priorit(?:y|ies)\s+(?:is|are)\s+"
        r"|\bI(?:'m|\s+am)\s+(?:mostly\s+|mainly\s+)?(?:focused|concerned)\s+(?:on|about|with)\s+"
        r"|\bmost\s+important(?:ly)?(?:\s+to\s+me)?(?:\s+(?:is|are)|:)?\s+)",
    ),
    rule(
        "focus",
        rf"{CLAUSE_START}(?P<v>(?i:[a-z][\w-]*(?:\s+[\w-]+){{0,2}}?))\s+(?i:(?:is|are)\s+my\s+"
        r"(?:top|main|biggest|first|number one|#1|no\.? 1)?\s*priorit(?:y|ies)"
        r"|matters?\s+(?:the\s+)?most|(?:is|are)\s+(?:the\s+)?most\s+important)\b",
        reject=re.compile(r"^(?i:what|which|that|it|this)\b"),
    ),
    rule(
        "name",
        r"(?i:\b(?:my name is|my name's|i'm called|i am called|name's))\s+"
        r"(?P<v>[A-Za-z][a-z'-]+(?:\s+[A-Z][\w'-]*)?)",
        0.95,
        statements_only=True,
        value=_name,
    ),
    # "Marta's the name": the idiom that opens an introduction.
    rule(
        "name",
        rf"^{_GREETING}?(?P<v>{NAME})(?:'s|\s+is)\s+the\s+name\b",
        0.9,
        statements_only=True,
        value=lambda m, s: _proper(m.group("v")),
    ),
    rule(
        "name",
        r"(?i:\b(?:call me|i go by))\s+(?P<v>[A-Za-z][a-z'-]+)",
        NICKNAME,
        statements_only=True,
        value=_name,
    ),
    rule(
        "name",
        rf"^{_GREETING}?(?:I'm|I am|(?i:this is))\s+(?P<v>{NAME})(?=\s*(?:[,.!;]|$|\s+(?:and|from"
        r"|here|btw)\b))"
        rf"|^{_GREETING}?(?P<v2>{NAME})\s+here\b",
        0.9,
        statements_only=True,
        value=lambda m, s: _name(m, s) if m.group("v") else _proper(m.group("v2")),
        claims=False,  # "I'm Tomas, data analyst": the apposition is the occupation's
    ),
    rule(
        "city",
        r"(?i:\b(?:I|we)(?:'ve|\s+have)?\s+(?:(?:just|recently|finally|now|actually|already|still)\s+)*"
        r"(?:live|am living|'m living|are living|'re living|reside|am based|'m based|are based"
        r"|'re based|moved|relocated|got transferred|was transferred|settled)"
        r"\s+(?:over\s+|back\s+|up\s+|down\s+|out\s+)?(?:in|to|into))"
        rf"\s+(?P<v>{_PLACE})",
        0.85,
        statements_only=True,
        value=_place,
    ),
    rule(
        "city",
        rf"(?:^|(?<=,\s))(?!(?i:{KIN_EN}|{OTHERS_EN}|he|she|they|it|you)\b)(?i:[a-z]+\s+){{0,2}}?"
        r"(?i:moved|relocated|got transferred|was transferred|transferred)"
        r"\s+(?i:over\s+|back\s+|up\s+|down\s+|out\s+)?"
        rf"(?i:to|into)\s+(?P<v>{_PLACE})"
        rf"|{CLAUSE_START}(?i:currently\s+|now\s+)?(?i:(?:I've\s+|I\s+have\s+)?been\s+)?"
        rf"(?i:based|living)\s+in\s+(?P<v2>{_PLACE})"
        rf"|(?i:\b(?:{OCCUPATION_EN})s?)\s+(?:based\s+|living\s+|working\s+)?in\s+(?P<v3>{_PLACE})"
        # The employer moved the user: "the company sent me to X", "shipped me off to X".
        r"|(?i:\b(?:sent|shipped|posted|transferred|relocated|moved)\s+(?:me|us)"
        rf"\s+(?:off\s+|over\s+|out\s+|back\s+)?to)\s+(?P<v5>{_PLACE})"
        # "Bristol's been home since 2020", "home is Leeds now"
        rf"|(?P<v6>{_PLACE})(?:'s|\s+has|\s+is)\s+(?:been\s+)?(?i:my\s+|our\s+)?home\b"
        rf"|(?i:\b(?:my|our)?\s*home\s+is\s+(?:now\s+)?)(?P<v7>{_PLACE})"
        rf"|(?i:\b(?:but|and)\s+(?:now\s+)?(?:live|living|based)\s+in)\s+(?P<v4>{_PLACE})",
        0.8,
        statements_only=True,
        value=lambda m, s: _proper(next(v for k, v in m.groupdict().items() if v and k[0] == "v")),
        claims=False,  # "nurse in Munich" also holds the occupation
    ),
    rule(
        "occupation",
        r"(?i:\bI\s+(?:work|am working|'m working|now work)(?:\s+(?:at|for"
        r"|in)\s+[^,.;]{1,30}?)?\s+as"
        r"|\bmy\s+(?:job|occupation|profession)\s+is)"
        rf"\s+(?:an?\s+)?(?P<v>{_PHRASE}){_PHRASE_END}"
        r"|(?i:\bI(?:'m|\s+am)\s+(?:(?:now|currently|officially|finally|proudly)\s+)*an?\s+"
        rf"(?P<v2>(?:[\w-]+\s+){{0,2}}(?:{OCCUPATION_EN})s?)\b)"
        rf"|{CLAUSE_START}(?i:an?\s+)?(?P<v3>(?i:(?:[\w-]+\s+){{0,2}}?(?:{OCCUPATION_EN})))\b"
        r"(?=\s+(?i:in|at|from|based|living|working)\b|\s*[,.;!]|$)",
        0.85,
        statements_only=True,
        value=_job,
        claims=False,  # "I'm a vegetarian nurse": the diet is read from the same words
        reject=re.compile(r"(?i:\b(?:former|ex|retired|aspiring|wannabe|future|not)\b)"),
    ),
    rule(
        "language",
        r"(?i:\b(?:answer|reply|respond|talk|speak|write|communicate|chat)(?:\s+to\s+me|\s+back)?"
        rf"(?:\s+only)?\s+in\s+(?P<v>{_LANG})\b|\bin\s+(?P<v2>{_LANG})\s+(?:please|pls|from now on"
        r"|only|instead)\b"
        rf"|\b(?:switch|change|go)\s+(?:back\s+)?to\s+(?P<v3>{_LANG})\b"
        rf"|\buse\s+(?P<v4>{_LANG})\s+(?:please|pls|from now on|only|instead)\b"
        rf"|{CLAUSE_START}(?:(?:ok|okay|ugh|hmm|never mind|nvm|let's|let's go|can we go"
        r"|please)[,\s]+)*"
        rf"back\s+to\s+(?P<v7>{_LANG})\b(?!\s+(?:class|lessons?|course|homework|school|book))"
        r"|(?<!\bI\s)(?<!\bcan\s)(?<!\bwe\s)\b(?:speak|talk|write|reply|answer|respond|chat)(?:\s+to\s+me)?"
        rf"\s+(?P<v6>{_LANG})(?=\s+(?:with|to)\s+me\b|\s+from now on\b|\s+please\b|\s*[?.!]|\s*$))"
        rf"|{CLAUSE_START}(?i:(?:actually|ok|okay|nvm|nah|no|oh|hmm|wait)[,\s]+)*(?P<v5>(?i:{_LANG}))\s+(?i:(?:is|'s)\s+"
        r"(?:fine|ok|okay|good|better|great|preferred|best)|please|pls|only)\b"
        # "Russian replies from here on", "Portuguese answers from now on": a standing request
        rf"|{CLAUSE_START}(?i:(?:plain|only|just)\s+)?(?P<v8>(?i:{_LANG}))\s+(?i:answers|replies"
        r"|responses)\s+(?i:from (?:now|here) on|only|please|pls|from here|going forward)\b",
        0.95,
    ),
    rule(
        "goal",
        r"(?i:\bI(?:'m|\s+am)\s+(?:currently\s+|now\s+|still\s+)?(?:looking|shopping|searching|hunting)\s+for\s+"
        rf"|(?:^|(?<=,\s)|(?<=[.!]\s)|\band\s+){_ADVERB}(?:look(?:ing|in'?)|shopping|hunting|searching)"
        r"\s+for\s+"
        # "I'm eyeing telescopes", "been eyeing a kayak": looking at buying one
        r"|\b(?:I'm|I\s+am|I've\s+been|been)\s+(?:\w+\s+)?eyeing\s+"
        r"|\bI(?:\s+(?:really\s+|just\s+|also\s+)?(?:want|need|plan|intend|would like|hope)"
        r"|'d\s+(?:like|love)"
        r"|(?:'m|\s+am)\s+(?:going|hoping|planning|trying))\s+to\s+(?:buy|get|purchase|find|order|rent|book)\s+"
        r"|\bI(?:'d|\s+would)\s+rather\s+(?:get|buy|have|go\s+with)\s+|\bI(?:'m|\s+am)\s+after\s+(?=an?\s)"
        # Chat drops the "I'm": "Trying to find a chef's knife", "hoping to get a tent".
        rf"|(?:^|(?<=[,.]\s)){_ADVERB}(?:trying|hoping|planning|looking|wanting)\s+to\s+"
        r"(?:buy|get|purchase|find|order|rent|book)\s+(?=(?:an?|some|new)\s)"
        r"|\bthinking\s+(?:of|about)\s+(?:buying|getting)\s+|\bin the market for\s+"
        r"|\bbud(?:get|eget|egt|gt|gte)\b(?:[^.;]|\.(?=\d)){0,40}?\bfor\s+(?=(?:an?|the|my|our)\s)"
        r"|\bspend\b[^.;]{0,30}?\bon\s+(?=(?:an?|some|new)\s))",
        0.8,
        statements_only=True,
        value=_goal,
    ),
    # A sum set aside for a thing: "let's say 300 euros for a grinder", "$80 max for a lamp".
    rule(
        "goal",
        r"(?i:(?:[$€£¥₹]\s?\d[\d,.]*k?|\b\d[\d,.]*k?\s*(?:euros?|dollars|bucks|pounds|quid|yen"
        r"|rupees))(?:\s+(?:max|tops|or so|ish))?\s+for\s+(?=(?:an?|the|my|our)\s))",
        0.8,
        statements_only=True,
        value=lambda m, s: None if _SPENT.search(s) else _goal(m, s),
    ),
    # "I need X" names a goal only when none is set: next to one, it is a requirement.
    rule(
        "goal",
        rf"(?:\bI\s+|^{_ADVERB}|(?<=,\s){_ADVERB}|\bso\s+I\s+|\bjust\s+)"
        r"(?i:(?:really\s+|just\s+|also\s+|still\s+)?"
        r"(?:need\s+(?!(?:to|the|my|it|this|that|more|your)\b)|want\s+(?=(?:an?|some)\s)))",
        WEAK_GOAL,
        statements_only=True,
        value=_goal,
    ),
    # Asking for help choosing is a goal even as a question ("can you help me pick a tent?").
    rule("goal", r"(?i:\bhelp\s+me\s+(?:choose|pick|find|select|buy|get)\s+)", 0.8, value=_goal),
    rule(
        "goal",
        r"(?i:\b(?:planning|thinking about|considering|booking|going on|taking)\s+(?:a|an|my"
        r"|our)\s+(?:\w+\s+)?"
        r"(?:trip|vacation|holiday|visit|getaway|honeymoon)"
        rf"\s+to\s+)(?P<v>{_PLACE})"
        # "planning a week in Lisbon", "booking three nights in Kyoto"
        r"|(?i:\b(?:planning|booking|spending|thinking about|considering)\s+(?:a|an|one|two|three"
        r"|four|five|\d+|a\s+few|a\s+couple(?:\s+of)?)\s+(?:days?|nights?|weeks?|weekends?"
        rf"|months?)\s+in\s+)(?P<v2>{_PLACE})",
        0.8,
        statements_only=True,
        value=lambda m, s: _proper(m.group("v") or m.group("v2")),
    ),
    # Subjectless "looking at e-bikes": weak, as a bare need is.
    rule(
        "goal",
        rf"(?:^|(?<=,\s)){_ADVERB}(?i:(?:I'm\s+|I\s+am\s+)?look(?:ing|in'?)\s+at\s+)"
        r"(?!(?:it|this|that|these|those|your|my|our|his|her|their"
        r"|the\s+(?:screen|map|list|options?|reviews?|link))\b)",
        WEAK_GOAL,
        statements_only=True,
        value=_goal,
    ),
    # A switch of goal: "thinking Greece instead", "going with a Kindle instead"; kept only
    # when a goal is known.
    rule(
        "goal",
        r"(?i:\b(?:thinking|going\s+with|go\s+with|let's\s+do|doing|getting|get|buying|buy"
        r"|switching\s+to|switch\s+to)\s+)(?:(?:an?|the|some)\s+)?"
        r"(?P<v>(?!(?:it|that|this|one|them)\b)[A-Za-z][\w'-]*(?:\s+[\w'-]+){0,2}?)"
        r"\s+instead\b",
        SWITCHED_GOAL,
        statements_only=True,
    ),
)


def _proper(v: str | None) -> str | None:
    if not v or v.split()[0].casefold() in NOT_NAMES:
        return None
    return v


__all__ = ["RULES", "cut"]
