"""The words of generated email tasks: people's names, topics, email texts, request phrasings.

All written for textgym (no WorkBench text). :mod:`~.generator` draws from these tuples with
its seeded generator, so changing or reordering an entry changes the task every seed gives.
"""

from __future__ import annotations

__all__ = [
    "CLOSERS",
    "COMPANY_DOMAINS",
    "FIRST",
    "LAST",
    "NOTES",
    "OPENERS",
    "PHRASINGS",
    "REPLIES",
    "SUBJECTS",
    "TOPICS",
]

#: The company's email domain (one per task: every address of its directory ends in it).
COMPANY_DOMAINS = (
    "atlas.com",
    "brightmill.com",
    "corvid.io",
    "harborline.com",
    "kestrel.co",
    "northpeak.com",
)

FIRST = (
    "maya",
    "tomas",
    "priya",
    "jonah",
    "aiko",
    "bruno",
    "chiara",
    "dev",
    "elena",
    "farid",
    "greta",
    "hiro",
    "ines",
    "jamal",
    "kaia",
    "lars",
    "mina",
    "nikolai",
    "olu",
    "paz",
    "quentin",
    "rosa",
    "soren",
    "talia",
    "umar",
    "vera",
    "wen",
    "ximena",
    "yusuf",
    "zara",
    "anton",
    "bea",
    "cyrus",
    "dalia",
    "emil",
    "fenna",
)
LAST = (
    "okafor",
    "lindqvist",
    "raman",
    "weiss",
    "tanaka",
    "costa",
    "ferri",
    "malhotra",
    "petrova",
    "haddad",
    "berg",
    "sato",
    "moreau",
    "reed",
    "novak",
    "holm",
    "park",
    "volkov",
    "adeyemi",
    "ruiz",
    "dubois",
    "silva",
    "nygaard",
    "levi",
    "qureshi",
    "ionescu",
    "zhou",
    "herrera",
    "demir",
    "osei",
)
TOPICS = (
    "quarterly budget",
    "offsite planning",
    "server migration",
    "hiring plan",
    "customer survey",
    "design review",
    "security audit",
    "holiday schedule",
    "vendor contract",
    "launch checklist",
    "training session",
    "office move",
    "pricing update",
    "support backlog",
    "data retention",
    "team lunch",
    "press release",
    "api deprecation",
    "onboarding guide",
    "sales forecast",
    "release notes",
    "expense reports",
    "board meeting",
    "mobile roadmap",
    "partner webinar",
    "code freeze",
    "brand refresh",
    "incident review",
    "travel policy",
    "annual review",
    "recruiting fair",
    "cloud costs",
    "accessibility fixes",
    "usability study",
    "invoice dispute",
    "sprint retro",
    "hackathon",
    "lease renewal",
    "tax filing",
    "beta feedback",
)
SUBJECTS = (
    "Update on {t}",
    "Question about {t}",
    "{T} notes",
    "Reminder: {t}",
    "Draft for the {t}",
    "Follow-up on {t}",
    "{T}: next steps",
)
OPENERS = (
    "I wanted to share where we are with the {t}.",
    "Could you take a look at the {t} before Friday?",
    "Quick note on the {t}: a few details changed.",
    "Here is my summary of the {t} discussion.",
    "Do you have time this week to talk about the {t}?",
)
CLOSERS = ("Thanks", "Best", "Cheers", "Regards")
REPLIES = (
    "Thanks, I will look at it today.",
    "Sounds good to me.",
    "Let's discuss it on Monday.",
    "Got it, thank you!",
    "I agree, please go ahead.",
    "Can you send me more details?",
)
NOTES = (
    "Please review the attached plan.",
    "The meeting moved to 3pm.",
    "We are on track for the deadline.",
    "I need your sign-off by Friday.",
    "Numbers are in the shared folder.",
)

#: The phrasings of each request family (``generator.FAMILIES``), drawn uniformly; fields in
#: braces are filled with ``str.format``: first names (``name``, ``sender``, ``names``: "Ana,
#: Bo and Cy"), ``subject``, ``body``, ``topic``.
PHRASINGS: dict[str, tuple[str, ...]] = {
    "send": (
        "send an email to {name} with the subject '{subject}' saying '{body}'",
        "email {name} about '{subject}' (use that as the subject) and write '{body}'",
        "write to {name}: subject '{subject}', body '{body}'",
    ),
    "send_many": (
        "send {names} each an email with the subject '{subject}' saying '{body}', in that order",
        "email {names} (one email each, in that order): subject '{subject}', body '{body}'",
    ),
    "reply_last": (
        "reply to the last email from {name} saying '{body}'",
        "answer {name}'s most recent email with '{body}'",
        "reply '{body}' to my latest email from {name}",
    ),
    "reply_about": (
        "reply to the email about the {topic} saying '{body}'",
        "answer the {topic} email with '{body}'",
    ),
    "forward_last": (
        "forward the last email from {sender} to {names}",
        "send {sender}'s most recent email on to {names}",
    ),
    "forward_about": ("forward the email about the {topic} to {name}",),
    "delete_last": (
        "delete my last email from {name}",
        "remove the most recent email {name} sent me",
        "trash {name}'s latest email",
    ),
    "delete_about": (
        "delete all emails about the {topic}",
        "get rid of every email on the {topic}",
    ),
    "search_forward": (
        "find the email {sender} sent me that mentions the {topic} and forward it to {name}",
    ),
    "noop": ("if {name} emailed me about the {topic}, delete that email",),
}
