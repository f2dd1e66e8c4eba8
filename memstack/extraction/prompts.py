"""The LLM extractor's prompts: one message (``EXTRACT_PROMPT``) or a user's messages of
an ingest batch (``BATCH_PROMPT``); both share the fields, the keys and the rules."""

from __future__ import annotations

_FIELDS = """\
Each fact has the fields
  "key": string, "value": JSON, "type": "preference" | "profile" | "task" | "constraint",
  "confidence": number 0..1, "source": "user_stated" | "extract" | "inferred",
  "supersedes": the old value this one replaces, or null,
  "override": true | false.

Use these keys when they fit:
  budget_limit (constraint): {"amount": number, "currency": ISO code such as "CNY", "USD"}
  likes, dislikes, focus (preference): list of short strings
  do_not_recommend (constraint): list of things the user does not want recommended
  name, city, occupation (profile): string
  language (preference): ISO 639-1 code of the language the user wants answers in
  goal (task): what the user is trying to get done, a short string
  anything else durable: a short snake_case English key (letters, digits, _).
Values are short: a number, a string, a list of short strings or a small object.
"""

_RULES = """\
Rules:
1. Current values only. When the user changes their mind the value is the NEW value,
   never a range, average or compromise: "预算五千……其实我可以到八千" gives 8000,
   not "5000-8000" and not 6500.
2. If known_facts holds the key with a different value, put that old value in
   "supersedes". If the message itself names the old value ("从五千改到八千"), use it.
3. "override" is true when the message carries a turn word: 其实, 不过, 改一下, 改成, 还是,
   算了, actually, instead, changed my mind, on second thought, scratch that.
4. Keep free-text values in the user's own language and words; never translate:
   "重点关注续航和重量" gives focus ["续航", "重量"].
5. Keep negations: "不要推荐游戏本" is do_not_recommend ["游戏本"], never likes.
6. source is "user_stated" for what the user said outright, "inferred" for anything you
   conclude that the user did not say, "extract" for stated facts that needed reading
   between the lines. Only the user's own statements count; no facts from small talk.
"""

_EXAMPLE_FACTS_1 = """\
[{"key": "budget_limit", "value": {"amount": 5000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated", "supersedes": null,
"override": false}, {"key": "focus", "value": ["续航", "重量"], "type": "preference",
"confidence": 0.9, "source": "user_stated", "supersedes": null, "override": false}]"""

_EXAMPLE_FACTS_2 = """\
[{"key": "budget_limit", "value": {"amount": 8000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated",
"supersedes": {"amount": 5000, "currency": "CNY"}, "override": true},
{"key": "do_not_recommend", "value": ["游戏本"], "type": "constraint",
"confidence": 0.95, "source": "user_stated", "supersedes": null, "override": true}]"""

EXTRACT_PROMPT = f"""\
You extract durable facts about the USER from one chat message, for a long-term memory.
Reply with ONE JSON object and nothing else: {{"facts": [...]}}. {_FIELDS}
{_RULES}   Nothing to extract: {{"facts": []}}.

Examples:
known_facts {{}}, message "我预算不超过五千，重点关注续航和重量" →
{{"facts": {_EXAMPLE_FACTS_1}}}

known_facts {{"budget_limit": {{"amount": 5000, "currency": "CNY"}}}},
message "其实我可以到八千，别再推荐游戏本了" →
{{"facts": {_EXAMPLE_FACTS_2}}}
"""

BATCH_PROMPT = f"""\
You extract durable facts about the USER from their chat messages, for a long-term
memory. You get known_facts and the user's messages in the order they were sent, each
with an index. Reply with ONE JSON object and nothing else, holding every index:
{{"facts_by_message": {{"0": [...], "1": [...]}}}}, the facts each message states.
{_FIELDS}
{_RULES}7. Read the messages in order: a fact an earlier message states is known for the later
   ones, so a later message that changes it supersedes the earlier value.
   A message with nothing to extract gets [].

Example:
known_facts {{}}, messages [{{"index": 0, "text": "我预算不超过五千，重点关注续航和重量"}},
{{"index": 1, "text": "好的"}}, {{"index": 2, "text": "其实我可以到八千，别再推荐游戏本了"}}] →
{{"facts_by_message": {{"0": {_EXAMPLE_FACTS_1},
"1": [],
"2": {_EXAMPLE_FACTS_2}}}}}
"""
