"""Write prompts.jsonl: SYNTHETIC labelled prompts for the chat-auto classifier, from templates.

    python examples/09-model-routes/make_prompts.py > examples/09-model-routes/prompts.jsonl

Nobody's traffic went into this file: each line is one of the templates below with its slots
filled from the word lists, chosen by a seeded generator (the same output every run). "hard"
means what a small model tends to get wrong: multi-step reasoning, proofs, designing or
debugging across components, quantitative trade-offs, plans under constraints. "easy" means a
lookup, a greeting, a rewrite, a short translation, formatting, one-step arithmetic. Topics are
shared on purpose (an easy and a hard prompt may both mention Kubernetes or SQL), and some easy
prompts are long (rewrite this paragraph) and some hard ones short (prove this), so neither the
topic nor the length alone gives the label away. A real route should be trained on its own
labelled traffic; this file only shows the format and lets the example run end to end. Each
line's "group" names its template: the trainer holds out whole templates, so its held-out
figures are for phrasings it never saw, not for a slot changed in one it learned.
"""

from __future__ import annotations

import json
import random

SEED = 18
PER_LABEL = 200
#: At most this many prompts from one template: no template dominates the file or a split.
PER_TEMPLATE = 8

TOPICS = [
    "Kubernetes",
    "PostgreSQL",
    "a Python web service",
    "Redis",
    "a React front end",
    "a payment system",
    "a message queue",
    "a mobile app",
    "an inference gateway",
    "a data lake",
    "a CI pipeline",
    "a search index",
    "an IoT fleet",
    "a recommendation system",
    "DNS",
]
LANGUAGES = ["Python", "Go", "Rust", "TypeScript", "Java", "SQL", "C"]
PEOPLE = ["my manager", "a new colleague", "the support team", "a customer", "my landlord"]
TONGUES = ["French", "German", "Spanish", "Italian", "Japanese", "Portuguese"]
PHRASES = [
    "good morning",
    "thank you very much",
    "where is the station",
    "the meeting is at noon",
    "see you tomorrow",
    "the invoice is attached",
    "happy birthday",
]
COUNTRIES = ["France", "Japan", "Canada", "Kenya", "Chile", "Norway", "Vietnam", "Egypt"]
THINGS = ["a latte", "a bicycle", "an umbrella", "a sandwich", "a notebook", "a lamp"]
PARAGRAPH = (
    "Our team moved the weekly sync to Thursday afternoons because Monday mornings were too "
    "busy with support tickets. Please update your calendars, bring the status of your open "
    "items, and add anything you want to discuss to the shared document before Wednesday "
    "evening so that we can keep the meeting short and focused on decisions."
)
EMAIL = (
    "hi, just checking if the {topic} update is still planned for friday, we need to tell "
    "our customers in advance and also the docs are not updated yet, thanks"
)

EASY = [
    "What is the capital of {country}?",
    "Translate '{phrase}' into {tongue}.",
    "Say hello to {person} in a friendly way.",
    "What does {topic} mean? One sentence, please.",
    "Fix the spelling in this sentence: 'I recieved the pakage yesterday.'",
    "What is {a} plus {b}?",
    "Give me a synonym for 'quick'.",
    "Convert {a} kilometres to miles.",
    "Rewrite this paragraph in a more formal tone:\n\n" + PARAGRAPH,
    "Summarize in one line: " + PARAGRAPH,
    "Make this email polite and clear: " + EMAIL,
    "Format this list as a Markdown table with columns name and country: "
    "Ana {country}, Bo {country2}, Chen {country3}.",
    "How do you say '{phrase}' in {tongue}?",
    "Is {thing} a noun or a verb?",
    "Write a short thank-you note to {person}.",
    "What time zone is {country} in?",
    "Name three colours.",
    "Which is bigger, {a} or {b}?",
    "What is the plural of 'mouse'?",
    "Write a one-line commit message for fixing a typo in the {topic} README.",
    "How much is {thing} usually, roughly?",
    "Tell me a fun fact about {country}.",
    "Spell out the number {a} in words.",
    "What file extension do {language} source files use?",
    "Remind me what port {topic} usually listens on.",
    "Turn this into a bullet list: milk, eggs, bread, {thing}.",
    "Write a haiku about {country}.",
    "What is the opposite of 'ancient'?",
    "Reply to {person} saying I will be {b} minutes late.",
    "Capitalise this title: 'notes on {topic} for beginners'.",
    "Give me a nickname for a cat who likes {thing}.",
    "What day of the week comes after Thursday?",
    "Write the {language} keyword for defining a function.",
    "Is {a} an even number?",
    "Shorten this to under ten words: " + PARAGRAPH,
    "Put these words in alphabetical order: {tongue}, {country}, zebra, apple.",
    "Correct the grammar: 'me and {person} goes to the office every days.'",
    "What currency do they use in {country}?",
    "Suggest a title for a blog post about {topic}.",
    "Write an out-of-office reply until {b} March.",
    "Round {a}.{b} to the nearest whole number.",
    "Tell {person} in {tongue} that '{phrase}'.",
]

HARD = [
    "Prove that there are infinitely many primes of the form 4k+3.",
    "Design a multi-region failover strategy for {topic} and explain the trade-offs between "
    "consistency, latency and cost at each step.",
    "Debug this: our {topic} deployment shows p99 latency doubling every afternoon while CPU "
    "stays flat. Walk through the hypotheses in order, what to measure for each, and why.",
    "Write a {language} function that merges overlapping intervals in O(n log n), prove it "
    "correct, and explain the edge cases.",
    "Derive the expected number of coin flips to see two heads in a row, step by step.",
    "Compare optimistic and pessimistic locking for {topic} under heavy write contention, with "
    "a worked example of where each one fails.",
    "Plan a zero-downtime migration of {topic} from a single database to sharded storage: "
    "phases, rollback at every phase, and how to verify each.",
    "Explain why this {language} code deadlocks and rewrite it so it cannot: two workers each "
    "take lock A then lock B, while a third takes B then A.",
    "Estimate how many GPUs {topic} needs for {a} requests per second with 2,000-token prompts "
    "and 300-token answers; show every assumption and how the answer changes if each is off "
    "by half.",
    "Given a budget of {a} dollars a month, choose between three caching designs for {topic} "
    "and justify the choice with numbers.",
    "Find the flaw in this argument: every {topic} outage we had was caused by a config "
    "change, so freezing config changes will remove outages.",
    "Solve for x and y: 3x + 2y = {a}, x - y = {b}. Then explain how the method generalises "
    "to n equations.",
    "Write a threat model for {topic}: assets, attackers, entry points, and the three "
    "mitigations with the best cost to risk ratio.",
    "Refactor a 2,000-line {language} module with global state into testable units; describe "
    "the order of steps so that every step keeps the tests green.",
    "Why does gradient descent with a too-large learning rate diverge? Give the derivation "
    "for a quadratic loss and the bound on the step size.",
    "Schedule {a} jobs with deadlines and durations on two machines to minimise lateness; "
    "give the algorithm, its complexity and a counterexample for the greedy approach.",
    "Our {topic} has a memory leak that appears only after {b} hours in production. Propose "
    "an investigation plan that does not require restarting it.",
    "Prove that the halting problem is undecidable, and relate it to why {language} linters "
    "cannot catch every infinite loop.",
    "Design the data model and the consistency rules for a shared calendar that works offline "
    "on phones and merges edits later; discuss conflicts.",
    "Analyse the amortised cost of a dynamic array that grows by 1.5x instead of 2x and "
    "explain which one wastes less memory over time.",
    "Write a SQL query that finds, for each customer, the longest streak of consecutive days "
    "with an order, and explain how it works.",
    "Two services disagree about the state of {topic} after a network partition. Explain how "
    "to detect it, repair it and prevent it, with the guarantees of each option.",
    "If {a} people each shake hands with everyone else once, how many handshakes happen? "
    "Prove the formula by induction.",
    "Explain, with a concrete failure scenario, why exactly-once delivery in {topic} is "
    "impossible in general and what systems actually provide instead.",
    "Our {language} service's error rate rose from 0.1% to {b}% after a dependency upgrade, "
    "but only for requests over {a} KB. Reason through the likely causes and how to confirm "
    "each without rolling back.",
    "Show that any comparison sort needs at least n log n comparisons in the worst case.",
    "Design rate limiting for {topic} that is fair across {a} tenants, survives the loss of "
    "one data centre, and never blocks a tenant that is under its quota.",
    "A queue in {topic} grows by {b} messages a second at peak and consumers each handle 40. "
    "How many consumers keep the backlog under a minute, and what happens at twice the load?",
    "Explain the CAP theorem with a worked example in {topic}, then say why it is often "
    "misapplied.",
    "Write a recursive descent parser in {language} for arithmetic with precedence and "
    "parentheses, and prove that it terminates.",
    "We must cut the cloud bill of {topic} by 30% without hurting p99 latency. Lay out the "
    "options, estimate each one's saving, and the order to try them in.",
    "Given the probabilities of three independent component failures, compute the "
    "availability of {topic} in a two-of-three quorum and compare it to a single node.",
    "Review this plan critically: we will rewrite {topic} in {language} over one quarter with "
    "two engineers and no feature freeze.",
    "Why can floating-point addition in {language} give different sums for the same numbers in "
    "a different order? Give an example and a way to bound the error.",
    "Design an experiment to tell whether a new ranking in {topic} improves retention, "
    "including the sample size for detecting a {b}% change.",
    "Reconstruct the timeline of an incident in {topic} from these symptoms: alerts at 02:10, "
    "failed health checks at 02:14, a deploy at 02:05, a certificate rotated at 01:55.",
    "Explain how a B-tree keeps its balance on insert and delete, with a worked example of a "
    "split and a merge.",
    "Decide whether {topic} should use event sourcing; argue both sides with the failure "
    "modes each one brings and what it costs to undo the decision later.",
    "Transform this recursive {language} function into an iterative one with an explicit "
    "stack, and prove the two return the same result.",
    "Find all integer solutions of x^2 - y^2 = {a} and explain the method.",
]


def fill(template: str, rng: random.Random) -> str:
    countries = rng.sample(COUNTRIES, 3)
    return template.format(
        topic=rng.choice(TOPICS),
        language=rng.choice(LANGUAGES),
        person=rng.choice(PEOPLE),
        tongue=rng.choice(TONGUES),
        phrase=rng.choice(PHRASES),
        country=countries[0],
        country2=countries[1],
        country3=countries[2],
        thing=rng.choice(THINGS),
        a=rng.randint(12, 999),
        b=rng.randint(2, 99),
    )


def prompts(seed: int = SEED) -> list[dict[str, str]]:
    """PER_LABEL distinct prompts per label, shuffled together."""
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    for label, templates in (("easy", EASY), ("hard", HARD)):
        seen: set[str] = set()
        used = [0] * len(templates)
        while len(seen) < PER_LABEL:
            number = rng.randrange(len(templates))
            text = fill(templates[number], rng)
            if text not in seen and used[number] < PER_TEMPLATE:
                seen.add(text)
                used[number] += 1
                rows.append({"text": text, "label": label, "group": f"{label}-{number:02d}"})
    rng.shuffle(rows)
    return rows


if __name__ == "__main__":
    for row in prompts():
        print(json.dumps(row, ensure_ascii=False))
