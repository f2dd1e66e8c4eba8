"""English rules for the goal: what the user is shopping for or planning a trip to.

A goal is read from a search or a purchase ("looking for", "in the market for", "I'd like
a"), a named trip ("planning a week in Lisbon") and, only while a goal is in play, from a
switch ("going with a Kindle instead", "booking Sri Lanka").
"""

from __future__ import annotations

import re

from memstack.ingest.extraction.rules.en import ADVERB, PLACE, proper_name
from memstack.ingest.extraction.rules.engine import SWITCHED_GOAL, WEAK_GOAL, Rule, rule

# Not what anyone shops for: "I need help", "I need more time".
_NOT_GOALS = re.compile(
    r"^(?i:help|advice|ideas?|suggestions?|recommendations?|more|to|it|that|this|something"
    r"|anything|someone|somebody|you|info|information|answers?)\b"
    r"|^(?i:time|money|sleep|rest|refunds?|favou?r|hand|hug|vacation|holiday|nap|drink|coffee"
    r"|break|minute|moment|second|job|space|privacy|quiet|haircut|ride|seat|prices|options"
    r"|notes)$"
    # a stretch of time a budget covers: "€15,000 for the first year"
    r"|^(?i:(?:first|next|last|whole|entire|full|coming)\s+)?(?:years?|months?|weeks?|weekends?"
    r"|semesters?|terms?|days?|nights?|summer|winter)(?:\s+(?:including|of|abroad|there)\b|$)"
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


RULES: tuple[Rule, ...] = (
    rule(
        "goal",
        r"(?i:\bI(?:'m|\s+am)\s+(?:currently\s+|now\s+|still\s+)?(?:looking|shopping|searching|hunting)\s+for\s+"
        rf"|(?:^|(?<=,\s)|(?<=[.!]\s)|\band\s+){ADVERB}(?:look(?:ing|in'?)|shopping|hunting|searching)"
        r"\s+for\s+"
        # "I'm eyeing telescopes", "been eyeing a kayak": looking at buying one
        r"|\b(?:I'm|I\s+am|I've\s+been|been)\s+(?:\w+\s+)?eyeing\s+"
        r"|\bI(?:\s+(?:really\s+|just\s+|also\s+)?(?:want|need|plan|intend|would like|hope)"
        r"|'d\s+(?:like|love)"
        r"|(?:'m|\s+am)\s+(?:going|hoping|planning|trying))\s+to\s+(?:buy|get|purchase|find|order|rent|book)\s+"
        r"(?:(?:him|her|them|us|me)\s+(?=(?:an?|some|new)\s))?"
        r"|\bI(?:'d|\s+would)\s+rather\s+(?:get|buy|have|go\s+with)\s+|\bI(?:'m|\s+am)\s+after\s+(?=an?\s)"
        # Chat drops the "I'm": "Trying to find a chef's knife", "hoping to get a tent".
        rf"|(?:^|(?<=[,.]\s)){ADVERB}(?:trying|hoping|planning|looking|wanting)\s+to\s+"
        r"(?:buy|get|purchase|find|order|rent|book)\s+(?=(?:an?|some|new)\s)"
        r"|\bthinking\s+(?:of|about)\s+(?:buying|getting)\s+|\bin the market for\s+"
        # "I'm comparing car insurance", "looking into pension plans": weighing what to buy
        r"|\b(?:I'm|I\s+am|we're|(?<=[,.]\s)|^)\s*(?:also\s+|now\s+)?(?:comparing|looking\s+into"
        r"|researching)\s+(?!(?:it|this|that|them|how|what|why|where|whether|if)\b)"
        r"|\b(?:pricing\s+out|shopping\s+around\s+for|saving\s+(?:up\s+)?for)\s+"
        r"|\btreat(?:ing)?\s+myself\s+to\s+"
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
        rf"(?:\bI\s+|^{ADVERB}|(?<=,\s){ADVERB}|\bso\s+I\s+|\bjust\s+)"
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
        rf"\s+to\s+)(?P<v>{PLACE})"
        # "planning a week in Lisbon", "booking three nights in Kyoto"
        r"|(?i:\b(?:planning|booking|spending|thinking about|considering)\s+(?:a|an|one|two|three"
        r"|four|five|\d+|a\s+few|a\s+couple(?:\s+of)?)\s+(?:days?|nights?|weeks?|weekends?"
        rf"|months?)\s+in\s+)(?P<v2>{PLACE})",
        0.8,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v") or m.group("v2")),
    ),
    # A destination weighed for a named trip: "thinking Tasmania for my sabbatical".
    rule(
        "goal",
        rf"(?i:\b(?:thinking|considering|eyeing|leaning\s+towards?)\s+)(?P<v>{PLACE})\s+"
        r"(?i:for\s+(?:my|our|the|a)\s+(?:\w+\s+)?(?:trip|vacation|holiday|sabbatical|honeymoon"
        r"|getaway|break|anniversary|birthday)\b)",
        0.8,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
    ),
    # "Morocco is the plan now": a destination named as the plan.
    rule(
        "goal",
        rf"(?:^|(?<=[,.;!]\s))(?P<v>{PLACE})\s+(?i:is|'s)\s+(?i:the\s+(?:new\s+)?plan|where\s+we're"
        r"\s+(?:going|headed|heading))\b",
        0.8,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
    ),
    # Booking a place names the trip once one is planned: "so we're booking Sri Lanka".
    rule(
        "goal",
        rf"(?i:\b(?:booking|booked|going\s+with)\s+)(?P<v>{PLACE})(?=\s*[,.;!\U0001F300-\U0001FAFF]|\s*$|\s+(?i:instead|now|then)\b)",
        SWITCHED_GOAL,
        statements_only=True,
        value=lambda m, s: proper_name(m.group("v")),
    ),
    # "I'd like a bread maker": a wish for a thing, weak as a bare need is.
    rule(
        "goal",
        r"(?:\bI(?:'d|\s+would)\s+(?:really\s+)?(?:like|love)\s+)(?=(?:an?|some|new)\s)",
        WEAK_GOAL,
        statements_only=True,
        value=_goal,
    ),
    # Subjectless "looking at e-bikes": weak, as a bare need is.
    rule(
        "goal",
        rf"(?:^|(?<=,\s)){ADVERB}(?i:(?:I'm\s+|I\s+am\s+)?look(?:ing|in'?)\s+at\s+)"
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
        r"|switching\s+to|switch\s+to|grab|grabbing)\s+)(?:(?:an?|the|some)\s+)?"
        r"(?P<v>(?!(?:it|that|this|one|them)\b)[A-Za-z][\w'-]*(?:\s+[\w'-]+){0,2}?)"
        r"\s+instead\b",
        SWITCHED_GOAL,
        statements_only=True,
    ),
)
