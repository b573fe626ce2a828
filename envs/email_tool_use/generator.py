"""A seeded generator of email tasks: a company directory, a mailbox and a request with gold calls.

Everything is drawn from one ``numpy`` generator, so a seed fixes the whole task. The mailbox
follows WorkBench's ``emails`` table (ids of 8 digits, ``inbox``/``outbox``, times before the
frozen clock 2023-11-30 23:59:00, bodies with literal ``\\n`` line breaks). A task is one to
``num_steps`` requests joined into one message; each request is drawn from :data:`FAMILIES`
(send, send to several, reply, forward to one or several, delete the last email from someone,
delete all emails about a subject, search then act, and a conditional request whose condition
is false, which makes no change). The gold calls are computed against the mailbox as the
earlier requests leave it. ``distractors`` adds that many older emails from each person a
request is about, on other subjects, so that "the last email from X" must be looked up.
All names, subjects and texts are written for textgym; they live in :mod:`~.words`, the
requests' wordings as :data:`~.words.PHRASINGS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from textgym.checks import check_int
from textgym.envs.email_tool_use.words import (
    CLOSERS,
    COMPANY_DOMAINS,
    FIRST,
    LAST,
    NOTES,
    OPENERS,
    PHRASINGS,
    REPLIES,
    SUBJECTS,
    TOPICS,
)
from textgym.envs.workplace.domains import NOW

__all__ = ["FAMILIES", "EmailTask", "generate_task"]

#: The workplace's frozen clock (:data:`textgym.envs.workplace.domains.NOW`), which the email
#: tools share, as a datetime: every generated email is sent before it.
_NOW = datetime.fromisoformat(NOW)


@dataclass
class _Email:
    direction: str
    person: str  # address
    topic: str
    subject: str
    sent: datetime
    body: str
    deleted: bool = False


@dataclass
class EmailTask:
    """A generated task: ``emails`` rows in ``TABLE_COLUMNS["emails"]`` order, the directory,
    the request, its gold calls ``({"name", "arguments"}, ...)`` and the template of each request."""

    company: str
    directory: tuple[str, ...]
    emails: tuple[tuple[str, ...], ...]
    query: str
    gold_calls: tuple[dict[str, Any], ...]
    templates: tuple[str, ...]


@dataclass
class _World:
    rng: np.random.Generator
    people: list[str]
    emails: list[_Email]
    distractors: int
    topics: list[str]  # fresh topics for requests, each used once
    background: list[str]  # topics of background mail and distractors
    used: set[str] = field(default_factory=set)  # people and topics already in a request
    calls: list[tuple[str, dict[str, Any]]] = field(
        default_factory=list
    )  # args may hold _Email refs

    def pick(self, items: list[Any]) -> Any:
        return items[int(self.rng.integers(len(items)))]

    def phrase(self, family: str, **fields: str) -> tuple[str, str]:
        """One of the family's :data:`~.words.PHRASINGS`, drawn (only when there is a choice)
        and filled in: ``(f"{family}/{k}", text)``."""
        texts = PHRASINGS[family]
        k = int(self.rng.integers(len(texts))) if len(texts) > 1 else 0
        return f"{family}/{k}", texts[k].format(**fields)

    def first(self, address: str) -> str:
        return address.split(".")[0].capitalize()

    def names(self, people: list[str]) -> str:
        """First names as a request lists them: "Ana", "Ana and Bo", "Ana, Bo and Cy"."""
        head = ", ".join(self.first(p) for p in people[:-1])
        return f"{head} and {self.first(people[-1])}" if head else self.first(people[-1])

    def fresh_person(self) -> str | None:
        free = [p for p in self.people if p not in self.used]
        if not free:
            return None
        person = self.pick(free)
        self.used.add(person)
        return person

    def fresh_topic(self) -> str:
        topic = self.topics.pop()
        self.used.add(topic)
        return topic

    def other_topic(self) -> str:
        return self.pick(self.background)

    def add_email(
        self, person: str, topic: str, sent: datetime, direction: str = "inbox"
    ) -> _Email:
        t = self.pick(list(SUBJECTS))
        subject = t.format(t=topic, T=topic.capitalize())
        body = (
            f"Sam,\\n\\n{self.pick(list(OPENERS)).format(t=topic)} {self.pick(list(NOTES))}\\n\\n"
            f"{self.pick(list(CLOSERS))},\\n{self.first(person)}"
        )
        email = _Email(direction, person, topic, subject, sent, body)
        self.emails.append(email)
        return email

    def random_time(self, before: datetime = _NOW, days: int = 60) -> datetime:
        return before - timedelta(seconds=int(self.rng.integers(600, days * 86400)))

    def latest_from(self, person: str) -> _Email | None:
        mine = [
            e
            for e in self.emails
            if e.person == person and e.direction == "inbox" and not e.deleted
        ]
        return max(mine, key=lambda e: e.sent) if mine else None

    def target_from(self, person: str) -> _Email:
        """The person's latest inbox email (made if none), with older distractors added."""
        target = self.latest_from(person) or self.add_email(
            person, self.fresh_topic(), self.random_time(days=20)
        )
        for _ in range(self.distractors):
            self.add_email(person, self.other_topic(), self.random_time(target.sent, days=30))
        return target

    def about(self, n: int) -> tuple[str, list[_Email]] | None:
        """``n`` new inbox emails on one fresh topic, from fresh people (distractors: theirs)."""
        if sum(p not in self.used for p in self.people) < n:
            return None
        topic = self.fresh_topic()
        out = []
        for _ in range(n):
            person = self.fresh_person()
            out.append(self.add_email(person, topic, self.random_time()))
            for _ in range(self.distractors):
                self.add_email(person, self.other_topic(), self.random_time())
        return topic, out


# ---------------------------------------------------------------- request families
# Each returns (template name, request text) after appending its gold calls, or None if it
# cannot apply (then another family is drawn).

Family = Callable[[_World], tuple[str, str] | None]


def _quote(w: _World) -> str:
    return w.pick(list(REPLIES))


def _about_fresh_person(family: Callable[[_World, str], tuple[str, str] | None]) -> Family:
    """A family whose request is about one person not yet in the task (none left: no request)."""

    def draw(w: _World) -> tuple[str, str] | None:
        person = w.fresh_person()
        return None if person is None else family(w, person)

    return draw


@_about_fresh_person
def _send(w: _World, person: str) -> tuple[str, str] | None:
    topic = w.fresh_topic()
    subject, body = topic.capitalize(), w.pick(list(NOTES))
    w.calls.append(("email_send_email", {"recipient": person, "subject": subject, "body": body}))
    return w.phrase("send", name=w.first(person), subject=subject, body=body)


def _send_many(w: _World) -> tuple[str, str] | None:
    people = [w.fresh_person() for _ in range(int(w.rng.integers(2, 4)))]
    if None in people:
        return None
    topic = w.fresh_topic()
    subject, body = topic.capitalize(), w.pick(list(NOTES))
    for p in people:
        w.calls.append(("email_send_email", {"recipient": p, "subject": subject, "body": body}))
    return w.phrase("send_many", names=w.names(people), subject=subject, body=body)


@_about_fresh_person
def _reply_last(w: _World, person: str) -> tuple[str, str] | None:
    target, body = w.target_from(person), _quote(w)
    w.calls.append(("email_reply_email", {"email_id": target, "body": body}))
    return w.phrase("reply_last", name=w.first(person), body=body)


def _reply_about(w: _World) -> tuple[str, str] | None:
    found = w.about(1)
    if found is None:
        return None
    topic, (target,) = found
    body = _quote(w)
    w.calls.append(("email_reply_email", {"email_id": target, "body": body}))
    return w.phrase("reply_about", topic=topic, body=body)


def _forward_last(w: _World) -> tuple[str, str] | None:
    sender, receivers = (
        w.fresh_person(),
        [w.fresh_person() for _ in range(int(w.rng.integers(1, 4)))],
    )
    if sender is None or None in receivers:
        return None
    target = w.target_from(sender)
    for r in receivers:
        w.calls.append(("email_forward_email", {"email_id": target, "recipient": r}))
    template, text = w.phrase("forward_last", sender=w.first(sender), names=w.names(receivers))
    return f"{template}/{len(receivers)}", text


@_about_fresh_person
def _forward_about(w: _World, receiver: str) -> tuple[str, str] | None:
    found = w.about(1)
    if found is None:
        return None
    topic, (target,) = found
    w.calls.append(("email_forward_email", {"email_id": target, "recipient": receiver}))
    return w.phrase("forward_about", topic=topic, name=w.first(receiver))


@_about_fresh_person
def _delete_last(w: _World, person: str) -> tuple[str, str] | None:
    target = w.target_from(person)
    w.calls.append(("email_delete_email", {"email_id": target}))
    target.deleted = True
    return w.phrase("delete_last", name=w.first(person))


def _delete_about(w: _World) -> tuple[str, str] | None:
    found = w.about(int(w.rng.integers(1, 4)))
    if found is None:
        return None
    topic, targets = found
    for t in sorted(targets, key=lambda e: e.sent, reverse=True):
        w.calls.append(("email_delete_email", {"email_id": t}))
        t.deleted = True
    return w.phrase("delete_about", topic=topic)


def _search_then_forward(w: _World) -> tuple[str, str] | None:
    sender, receiver = w.fresh_person(), w.fresh_person()
    if sender is None or receiver is None:
        return None
    topic = w.fresh_topic()
    target = w.add_email(sender, topic, w.random_time())
    for _ in range(w.distractors):
        w.add_email(sender, w.other_topic(), w.random_time())
    w.calls.append(("email_search_emails", {"query": topic}))
    w.calls.append(("email_forward_email", {"email_id": target, "recipient": receiver}))
    return w.phrase("search_forward", sender=w.first(sender), topic=topic, name=w.first(receiver))


@_about_fresh_person
def _noop_condition(w: _World, person: str) -> tuple[str, str] | None:
    topic = w.fresh_topic()  # never used in the mailbox, so the condition is false
    for _ in range(w.distractors):
        w.add_email(person, w.other_topic(), w.random_time())
    return w.phrase("noop", name=w.first(person), topic=topic)


#: Request families, drawn uniformly.
FAMILIES: dict[str, Family] = {
    "send": _send,
    "send_many": _send_many,
    "reply_last": _reply_last,
    "reply_about": _reply_about,
    "forward_last": _forward_last,
    "forward_about": _forward_about,
    "delete_last": _delete_last,
    "delete_about": _delete_about,
    "search_forward": _search_then_forward,
    "noop": _noop_condition,
}


def generate_task(
    rng: np.random.Generator, inbox_size: int = 20, distractors: int = 2, num_steps: int = 1
) -> EmailTask:
    """Draw one task from ``rng``.

    Args:
        rng: The generator (the env passes one seeded from its ``np_random``).
        inbox_size: Background emails before the request's own, >= 0 (about 1 in 5 in the outbox).
        distractors: Older emails added per person a request is about, >= 0.
        num_steps: Requests joined into the task, 1 to 4.

    Raises:
        ValueError: for a knob out of range.
    """
    check_int("inbox_size", inbox_size, low=0, high=200)
    check_int("distractors", distractors, low=0, high=10)
    check_int("num_steps", num_steps, low=1, high=4)
    company = COMPANY_DOMAINS[int(rng.integers(len(COMPANY_DOMAINS)))]
    n_people = int(rng.integers(18, 25))  # 4 requests use at most 16 people
    firsts = rng.choice(len(FIRST), size=n_people, replace=False)
    lasts = rng.choice(len(LAST), size=n_people, replace=True)
    people = sorted(f"{FIRST[i]}.{LAST[j]}@{company}" for i, j in zip(firsts, lasts))
    topics = [TOPICS[i] for i in rng.permutation(len(TOPICS))]
    # Half the topics are for background mail and distractors, half for requests (never shared).
    half = len(TOPICS) // 2
    w = _World(rng, people, [], distractors, topics[half:], topics[:half])
    for _ in range(inbox_size):
        direction = "outbox" if rng.random() < 0.2 else "inbox"
        w.add_email(w.pick(people), w.other_topic(), w.random_time(), direction)
    texts, templates = [], []
    while len(texts) < num_steps:
        name = list(FAMILIES)[int(rng.integers(len(FAMILIES)))]
        if name == "noop" and num_steps > 1:
            continue
        used = set(w.used)
        result = FAMILIES[name](w)
        if result is None:
            w.used = used  # nothing was added; free the people it tried
        else:
            templates.append(result[0])
            texts.append(result[1])
    # Rows in time order; ids are a random permutation so that position says nothing.
    w.emails.sort(key=lambda e: e.sent)
    ids = rng.permutation(len(w.emails))
    id_of = {id(e): f"{int(i):08d}" for e, i in zip(w.emails, ids)}
    rows = tuple(
        (
            id_of[id(e)],
            e.direction,
            e.person,
            e.subject,
            e.sent.strftime("%Y-%m-%d %H:%M:%S"),
            e.body,
        )
        for e in w.emails
    )
    calls = tuple(
        {
            "name": n,
            "arguments": {k: id_of[id(v)] if isinstance(v, _Email) else v for k, v in args.items()},
        }
        for n, args in w.calls
    )
    query = "Please " + "; then ".join(texts) + "."
    return EmailTask(company, tuple(people), rows, query, calls, tuple(templates))
