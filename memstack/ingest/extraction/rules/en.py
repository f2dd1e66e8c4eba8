"""English rules for text-valued and list-valued keys.

English marks the subject, so most rules anchor on "I"/"my"; a few also accept the
subjectless fragments of chat ("finally moved to Leeds", "Looking for a tent", "Pescatarian.")
at the start of a sentence or clause, where the speaker can only be the user.
"""

from __future__ import annotations

import re

from memstack.core.facts.vocabulary import LANGUAGES
from memstack.ingest.extraction.rules.engine import NICKNAME, Rule, cut, rule
from memstack.ingest.extraction.rules.lexicon import (
    DEPARTMENTS_EN,
    DIETS_EN,
    KIN_EN,
    NOT_NAMES,
    OCCUPATION_EN,
    OTHERS_EN,
)

_LANG = "|".join(sorted((w for w in LANGUAGES if w.isascii() and len(w) > 3), key=len)[::-1])
# Latin-1 letters too: "Tomás", "Zoë", "Óscar".
NAME = r"[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ]+(?:[-'][A-ZÀ-ÖØ-Þ]?[a-zß-öø-ÿ]+)?"
PLACE = r"[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,2}"
_PHRASE = r"[A-Za-z][\w-]*(?:\s+[\w-]+){0,3}?"
_PHRASE_END_JOB = (
    r"(?=$|[,.;!?]|\s+(?:at|in|for|and|but|with|since|from|now|on|next|this|starting|tomorrow"
    r"|today|gig|job|position|role|it's|its|so|because|though)\b)"
)
_PHRASE_END = (
    r"(?=$|[,.;!?]|\s+(?:at|in|for|and|but|with|since|from|now|on|next|this|starting|tomorrow"
    r"|today)\b)"
)
# Adverbs a subjectless chat fragment may open with ("just need a ...", "still looking for").
ADVERB = r"(?i:(?:just|really|also|still|now|currently|mostly|mainly|only|definitely|probably)\s+)?"
GREETING = r"(?i:(?:hi|hey|hello|hiya|yo|morning|evening)(?:\s+there)?[,!.]*\s+)"
CLAUSE_START = r"(?:^|(?<=[,;:]\s)|(?<=[,;:]))\s*"

# A self-introduction: "I'm Tomas, ...", "Ben here, ...", "My name is Ana, ...".
_INTRO = re.compile(
    rf"^{GREETING}?(?:I'm\s+{NAME}|I\s+am\s+{NAME}|{NAME}\s+here|(?i:my name is|this is)\s+{NAME}"
    rf"|{NAME},\s*\d{{2}}|(?i:name's|my name's)\s+{NAME}"
    rf"|(?i:(?:quick\s+)?(?:bio|intro|about me))\s*:\s*{NAME})\s*[,.!]"
)
_DIET_WORD = re.compile(rf"\b(?i:{DIETS_EN})\s+")


def introduced(sentence: str) -> bool:
    """Whether ``sentence`` opens with the user introducing themselves, so its bare
    fragments ("software engineer in Pune", "hate coriander") are about the user."""
    return _INTRO.match(sentence) is not None


# A bare job and a city as the whole clause: "design student in Nashik", "welder in Jos here".
_JOB_IN_PLACE = re.compile(rf"\s+in\s+{PLACE}\s*(?:(?i:here)\b|[,.;!—-]|$)")


# "my friend, a teacher in Leeds, ...": the job and the city are the friend's.
_APPOSED = re.compile(r"(?i:\b(?:my|our|his|her|their)\s+[\w'-]+(?:\s+[\w'-]+)?,\s*(?:an?\s+)?)$")


def apposed(sentence: str, start: int) -> bool:
    """Whether the words at ``start`` describe someone the user just named."""
    # the apposition stands just before: a bounded window keeps long inputs linear
    return _APPOSED.search(sentence[max(0, start - 80) : start]) is not None


def _job(m: re.Match[str], sentence: str) -> str | None:
    """An occupation; an apposition ("I'm Ben, accountant in Leeds") only in an intro or
    as a telegraphic "<job> in <city>" clause, which only the user writes of themselves."""
    if m.group("v3") and (
        apposed(sentence, m.start())
        or not (introduced(sentence) or _JOB_IN_PLACE.match(sentence, m.end()))
    ):
        return None
    v = next(g for g in (m.group("v"), m.group("v2"), m.group("v3"), m.group("v4")) if g)
    v = re.sub(r"^\S+-based\s+", "", v)  # "Vienna-based vet": the place is the city's
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
    # "we left Reno in june": the city left, no new one said in this clause.
    rule(
        "city",
        r"(?i:\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|finally\s+|already\s+)?(?:left|moved\s+"
        r"(?:out\s+of|away\s+from))\s+)(?P<v>[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*)?)"
        r"(?!\s+(?i:for|to)\b)",
        0.8,
        statements_only=True,
        retracts=True,
    ),
    # "moved out last month, couch-surfing": gone from the city, no new one said.
    rule(
        "city",
        r"(?i:(?:\bI(?:'ve|\s+have)?\s+|^|(?<=[,.]\s))(?:just\s+|finally\s+)?moved\s+(?:out|away)\b"
        r"(?!\s+(?:of|from|to|into)\b))",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "occupation",
        r"(?i:\bI\s+(?:just\s+)?(?:quit|lost|left)\s+my\s+job\b"
        r"|\bI\s+(?:got|was|have been|'ve been)\s+(?:laid off|fired|let go)\b"
        r"|\bI(?:'m|\s+am)\s+(?:now\s+)?(?:unemployed|out of work|between jobs)\b"
        # "retired in May", "I'm retired now": no job any more ("a retired nurse" is read
        # by the occupation rule, which refuses it)
        r"|(?:\bI(?:'ve|\s+have)?\s+|^|(?<=,\s))(?:just\s+|recently\s+|finally\s+|officially\s+)?"
        r"retired\b(?!\s+(?:\w+\s+)?(?:nurse|teacher|\w+(?:er|or|ist|ian))\b)"
        r"|\bI(?:'m|\s+am)\s+(?:now\s+|officially\s+|finally\s+)?retired\b"
        r"|\b(?:quit|left)\s+(?:my\s+job|the\s+job|work)\b)",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "goal",
        r"(?i:\bI\s+(?:don't|do not)\s+need\s+(?:it|one|that)\s+(?:anymore|any more)\b"
        r"|\b(?:not|no longer)\s+(?:buying|getting|looking for)\s+(?:it|one|that|anything)"
        r"(?:\s+(?:anymore|any more))?\b)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "goal",
        r"(?i:\bnot\s+(?:travel(?:l)?ing|going)\s+anywhere\b|\b(?:the\s+)?(?:trip|plan|holiday"
        r"|vacation)\s+(?:is|'s)\s+(?:off|cancel(?:l)?ed|dead)\b|\bcancel(?:l)?ed\s+(?:the|my|our)"
        r"\s+(?:trip|plans?|holiday|vacation|order)\b)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "budget_limit",
        r"(?i:\bno\s+(?:budget|price)\s+(?:limit|cap|ceiling)\b|\bmoney(?:'s|\s+is)\s+no\s+object\b"
        r"|\bbudget\s+(?:is\s+)?(?:unlimited|off\s+the\s+table)\b)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "family",
        r"(?i:\b(?:we|I)\s+(?:got|are|'re|am|'m)\s+(?:now\s+)?divorced\b"
        r"|\b(?:the|my|our)\s+divorce\s+(?:was|is|went|got)\s+(?:finali[sz]ed|final|through)\b"
        r"|\bex-?(?:wife|husband)\b)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: list(_SPOUSES),
    ),
    # "I've fallen out of love with running", "gone off fantasy": a like given up.
    rule(
        "likes",
        r"(?i:\b(?:fallen|fell)\s+out\s+of\s+love\s+with|\b(?:I've|I\s+have)\s+gone\s+off"
        r"|\blost\s+(?:all\s+)?interest\s+in|\bI'?m\s+(?:so\s+)?over|\bdone\s+with)\s+"
        r"(?P<v>[a-z][\w'-]*(?:\s+[\w'-]+){0,2}?)"
        r"(?=\s*(?:[,.;!]|$|\s+(?:now|for good|tbh|honestly)\b))",
        0.8,
        retracts=True,
        claims=False,
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
        r"\s*,?\s*(?:please|pls|plz|thanks|thank you|period|full stop|ever|at all|either)\b)",
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
        r"(?i:\bI\s+(?:really\s+|also\s+|do\s+|just\s+|only\s+|absolutely\s+|definitely\s+|much\s+"
        r"|generally\s+"
        r"|usually\s+|would\s+|still\s+)*(?:like|love|prefer|enjoy|adore)\s+(?!to\s+know|it\b|that\b)"
        r"|\bI'd\s+(?:rather\s+have|prefer)\s+|\bI(?:'m|\s+am)\s+(?:really\s+|now\s+|mostly\s+|more\s+|big\s+"
        r"|much\s+more\s+|way\s+more\s+)*(?:into|a\s+(?:big\s+)?fan\s+of)\s+)",
    ),
    # "my hobbies are rock climbing and trail running", "hobbies: chess, go"
    rule(
        "likes",
        r"(?i:\bmy\s+(?:main\s+|favou?rite\s+)?(?:hobbies|hobby|pastimes?|passions?)\s+(?:are|is|include)\s+"
        r"|^(?:hobbies|interests)\s*:\s*)",
        statements_only=True,
    ),
    # "comfy SUVs are what I like now": the thing first, then the liking.
    rule(
        "likes",
        rf"{CLAUSE_START}(?P<v>(?i:[a-z][\w-]*(?:\s+[\w-]+){{0,2}}?))\s+(?i:is|are)\s+what\s+I\s+"
        r"(?i:(?:really\s+)?(?:like|love|enjoy|prefer|want))\b",
        reject=re.compile(r"^(?i:what|which|that|it|this|there)\b"),
    ),
    rule(
        "likes",
        r"^(?i:(?:also|really|totally|and)\s+)*(?i:love|enjoy|adore|(?:a\s+)?(?:big|huge)\s+fan\s+of)"
        r"\s+(?!(?:it|that|this|you)\b)",
        statements_only=True,
    ),
    # A sentence opening with the feeling has the user as speaker: "can't stand X though".
    rule(
        "dislikes",
        # (not "… either", which echoes a statement before it and is read only after one)
        r"(?:^|(?<=,\s))(?![^,.;!?]*\beither\W*(?:[,.;!?]|$))"
        r"(?i:(?:really\s+|honestly\s+)?(?:can't stand|cannot stand"
        r"|hate|dislike|not a fan of))\s+",
        statements_only=True,
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
        r"(?i:(?:\bI\s+|(?:^|(?<=,\s))(?=(?:really|mostly|mainly)\s))(?:really\s+|mostly\s+|mainly\s+)?care\s+"
        r"(?:(?:the\s+)?most|mostly|a lot|mainly)?\s*about\s+"
        r"|\bwhat\s+(?:matters|counts)\s+(?:most\s+)?(?:to me\s+)?(?:most\s+)?is\s+"
        r"|\bmy\s+(?:top\s+|main\s+|biggest\s+)?priorit(?:y|ies)\s+(?:is|are)\s+"
        r"|\bI(?:'m|\s+am)\s+(?:mostly\s+|mainly\s+)?(?:focused|concerned)\s+(?:on|about|with)\s+"
        r"|\bmost\s+important(?:ly)?(?:\s+to\s+me)?(?:\s+(?:is|are)|:)?\s+)",
    ),
    # "the main focus for our reno is X", "my focus this year is X", "I want to focus on X"
    rule(
        "focus",
        r"(?i:\b(?:my|our|the)\s+(?:main\s+|top\s+|biggest\s+)?focus(?:\s+[\w-]+){0,4}?\s+(?:is|are)\s+"
        r"|\bI\s+(?:\w+\s+){0,2}?(?:want\s+to\s+|wanna\s+|'d\s+like\s+to\s+)?focus(?:ing)?\s+on\s+)",
        statements_only=True,
        claims=False,
    ),
    rule(
        "focus",
        rf"{CLAUSE_START}(?i:(?:nah|actually|ok|okay|well|so|and|but|oh)[,\s]+)*(?i:the\s+)?"
        rf"(?P<v>(?i:[a-z][\w-]*(?:\s+[\w-]+){{0,2}}?))\s+(?i:(?:is|are)\s+my\s+"
        r"(?:top|main|biggest|first|number one|#1|no\.? 1)?\s*priorit(?:y|ies)"
        r"|matters?\s+(?:the\s+)?most|(?:is|are)\s+(?:the\s+)?most\s+important"
        r"|(?:is|are)\s+what\s+(?:really\s+)?(?:matters?|counts)|matters?\s+more"
        r"|(?:is|are)\s+the\s+(?:main|only|one|biggest|big|first|key)\s+thing"
        r"(?:\s+I\s+care\s+about|\s+for\s+me)?|(?:is|are)\s+(?:key|a\s+must)(?=\s*[,.;!]|\s*$))\b",
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
        rf"^{GREETING}?(?P<v>{NAME})(?:'s|\s+is)\s+the\s+name\b",
        0.9,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
    ),
    # "quick bio: Malik, civil engineer, ...": a name heading a self-description.
    rule(
        "name",
        rf"^{GREETING}?(?i:(?:quick\s+)?(?:bio|intro|about me))\s*:\s*(?P<v>{NAME})(?=\s*[,.]|$)",
        0.9,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
        claims=False,
    ),
    # "hey, it's Callum — ...": the user saying who is writing.
    rule(
        "name",
        rf"^{GREETING}?(?i:it's|its|it is)\s+(?P<v>{NAME})(?=\s*(?:[,.!;]|$))",
        0.85,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
    ),
    # "Servus! Ingrid, 41, ...": a name followed by an age opens an introduction.
    rule(
        "name",
        rf"^{GREETING}?(?P<v>{NAME}),\s*\d{{2}}\s*(?:[,.;]|$)",
        0.9,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
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
        rf"^{GREETING}?(?:I'm|I am|(?i:this is))\s+(?P<v>{NAME})(?=\s*(?:[,.!;]|$|\s+(?:and|from"
        r"|here|btw)\b))"
        rf"|^{GREETING}?(?P<v2>{NAME})\s+here\b",
        0.9,
        statements_only=True,
        value=lambda m, s: _name(m, s) if m.group("v") else proper_name(m.group("v2")),
        claims=False,  # "I'm Tomas, data analyst": the apposition is the occupation's
    ),
    rule(
        "city",
        r"(?i:\b(?:I|we)(?:'ve|\s+have)?\s+(?:(?:just|recently|finally|now|actually|already|still)\s+)*"
        r"(?:live|am living|'m living|are living|'re living|reside|am based|'m based|are based"
        r"|'re based|moved|relocated|got transferred|was transferred|settled)"
        r"\s+(?:over\s+|back\s+|up\s+|down\s+|out\s+)?(?:in|to|into))"
        rf"\s+(?P<v>{PLACE})",
        0.85,
        statements_only=True,
        value=_place,
    ),
    rule(
        "city",
        rf"(?:^|(?<=,\s))(?!(?i:{KIN_EN}|{OTHERS_EN}|he|she|they|it|you)\b)(?i:[a-z]+\s+){{0,2}}?"
        r"(?i:moved|relocated|got transferred|was transferred|transferred)"
        r"\s+(?i:over\s+|back\s+|up\s+|down\s+|out\s+)?"
        rf"(?i:to|into)\s+(?P<v>{PLACE})"
        rf"|{CLAUSE_START}(?i:currently\s+|now\s+)?(?i:(?:I've\s+|I\s+have\s+)?been\s+)?"
        rf"(?i:based|living|live)\s+in\s+(?P<v2>{PLACE})"
        rf"|(?i:\b(?:{OCCUPATION_EN})s?)\s+(?:based\s+|living\s+|working\s+|out\s+)?in\s+(?P<v3>{PLACE})"
        # The employer moved the user: "the company sent me to X", "shipped me off to X".
        r"|(?i:\b(?:sent|shipped|posted|transferred|relocated|moved)\s+(?:me|us)"
        rf"\s+(?:off\s+|over\s+|out\s+|back\s+)?to)\s+(?P<v5>{PLACE})"
        # "Bristol's been home since 2020", "home is Leeds now"
        rf"|(?P<v6>{PLACE})(?:'s|\s+has|\s+is)\s+(?:been\s+)?(?i:my\s+|our\s+)?home\b"
        rf"|(?i:\b(?:my|our)?\s*home\s+is\s+(?:now\s+)?)(?P<v7>{PLACE})"
        rf"|(?i:\b(?:but|and)\s+(?:now\s+)?(?:live|living|based)\s+in)\s+(?P<v4>{PLACE})"
        # "Vienna-based vet"; "swapped Boise for Wellington", "left Leeds for Bristol": a move
        rf"|(?P<v8>{PLACE})-based\b"
        rf"|(?i:\b(?:just\s+)?(?:swapped|traded|left)\s+){PLACE}\s+(?i:for)\s+(?P<v9>{PLACE})",
        0.8,
        statements_only=True,
        value=lambda m, s: (
            None
            if apposed(s, m.start())
            else proper_name(next(v for k, v in m.groupdict().items() if v and k[0] == "v"))
        ),
        claims=False,  # "nurse in Munich" also holds the occupation
    ),
    rule(
        "occupation",
        r"(?i:(?:\bI\s+|(?<=[,.]\s))(?:work|am working|'m working|now work|(?:just\s+)?started"
        r"|start|'m starting|am starting)(?:\s+(?:remote(?:ly)?|full-time|part-time|freelance))?"
        r"(?:\s+(?:work(?:ing)?\s+)?(?:at|for|in)\s+[^,.;]{1,30}?)?\s+as"
        # "already landed a lifeguard gig", "I work in HR": the role by other words
        r"|\b(?:landed|got|started)\s+(?:a|an|the)(?=\s+[\w-]+(?:\s+[\w-]+)?\s+(?:gig|job|position|role)\b)"
        rf"|\bI(?:\s+work|'m|\s+am)\s+in(?=\s+(?:{DEPARTMENTS_EN})\b)"
        r"|\bI\s+(?:just\s+)?(?:got|landed)\s+(?:a|the)\s+job\s+as"
        r"|(?:\bI\s+|^|(?<=,\s))(?:just\s+)?got\s+hired\s+as"
        r"|\bmy\s+(?:job|occupation|profession)\s+is)"
        rf"\s+(?:an?\s+)?(?P<v>{_PHRASE}){_PHRASE_END_JOB}"
        r"|(?i:\bI(?:'m|\s+am)\s+(?:(?:now|currently|officially|finally|proudly)\s+)*an?\s+"
        rf"(?P<v2>(?:[\w-]+\s+){{0,2}}(?:{OCCUPATION_EN})s?)\b)"
        rf"|{CLAUSE_START}(?i:an?\s+)?(?P<v3>(?i:(?:[\w-]+\s+|\w+-){{0,2}}?(?:{OCCUPATION_EN})))\b"
        r"(?=\s+(?i:in|at|from|based|living|working|out)\b|\s*[,.;!]|$)"
        # "Montreal-based wildlife photographer here": introducing oneself by the job
        rf"|^(?:\S+-based\s+)?(?P<v4>(?i:(?:[\w-]+\s+){{0,2}}?(?:{OCCUPATION_EN})))\s+here\b",
        0.85,
        statements_only=True,
        value=_job,
        claims=False,  # "I'm a vegetarian nurse": the diet is read from the same words
        reject=re.compile(
            r"(?i:\b(?:former|ex|retired|aspiring|wannabe|future|not)\b"
            r"|^(?:new|first|second|another|better|good|great|dream|temp|summer|side|part-time"
            r"|full-time|remote|real|proper)$)"
        ),
    ),
    rule(
        "language",
        r"(?i:\bkeep\s+(?:the\s+|your\s+)?(?:replies|answers|responses|it)\s+in\s+(?P<v9>"
        rf"{_LANG})\b"
        rf"|\b(?:do|use|go\s+with|try)\s+(?P<v10>{_LANG})\s+instead\b"
        rf"|{CLAUSE_START}(?P<v11>(?i:{_LANG}))\s+instead\b"
        r"|\b(?:answer|reply|respond|talk|speak|write|communicate|chat)(?:\s+to\s+me|\s+back)?"
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
)


def proper_name(v: str | None) -> str | None:
    if not v or v.split()[0].casefold() in NOT_NAMES:
        return None
    return v


__all__ = ["RULES", "cut"]
