"""The synthetic company behind `ragpulse demo`: services, routes, a knowledge base of passages and
questions answered from them.

Each fact has the passage that states it, a question a user would ask, the answer a good RAG
service gives from that passage, and a wrong answer (other numbers, other names) that a service
gives when the passage was not retrieved: the hallucination of the "missing facts" regression.
"""

# ruff: noqa: E501  (the knowledge base is prose: one passage per line reads best)

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fact:
    id: str
    passage: str
    question: str
    answer: str
    wrong_answer: str


@dataclass(frozen=True, slots=True)
class Route:
    service: str
    route: str
    facts: tuple[Fact, ...]


def _fact(doc: str, passage: str, question: str, answer: str, wrong: str) -> Fact:
    return Fact(doc, passage, question, answer, wrong)


ROUTES: tuple[Route, ...] = (
    Route("support-assistant", "/api/billing", (
        _fact("kb-billing-01",
              "Refunds for annual plans are issued within 14 days of the cancellation request. "
              "The refund goes back to the original payment method.",
              "How long does a refund for an annual plan take?",
              "Refunds for annual plans are issued within 14 days of the cancellation request.",
              "Annual plan refunds take 45 business days and are paid as store credit by Stripe."),
        _fact("kb-billing-02",
              "Invoices are generated on the first day of each month. "
              "Each invoice can be downloaded as a PDF from the Billing page.",
              "When are invoices generated?",
              "Invoices are generated on the first day of each month and can be downloaded as a PDF.",
              "Invoices are emailed every 15th by Quickbooks in Excel format."),
        _fact("kb-billing-03",
              "The Team plan costs 49 euros per seat per month. "
              "Seats can be added at any time and are billed pro rata.",
              "How much does the Team plan cost?",
              "The Team plan costs 49 euros per seat per month, and added seats are billed pro rata.",
              "The Team plan costs 99 dollars per account per year with Oracle licensing."),
        _fact("kb-billing-04",
              "Failed card payments are retried 3 times over 7 days. "
              "After the last retry the workspace becomes read-only.",
              "What happens when a card payment fails?",
              "Failed card payments are retried 3 times over 7 days, then the workspace becomes read-only.",
              "Failed payments suspend the account after 1 hour and Visa deletes the workspace."),
        _fact("kb-billing-05",
              "VAT is added to invoices for customers in the European Union. "
              "Business customers can enter a VAT number to be exempt.",
              "Do you charge VAT?",
              "VAT is added for customers in the European Union, unless a business enters a VAT number.",
              "VAT of 30 percent is charged worldwide, including Canada and Japan."),
    )),
    Route("support-assistant", "/api/shipping", (
        _fact("kb-ship-01",
              "Standard delivery within Germany takes 2 to 3 working days. "
              "Orders placed before noon ship the same day.",
              "How long does standard delivery take in Germany?",
              "Standard delivery within Germany takes 2 to 3 working days; orders before noon ship the same day.",
              "Delivery in Germany takes 12 weeks because DHL ships from Singapore."),
        _fact("kb-ship-02",
              "Returns are free within 30 days of delivery. "
              "The return label is printed from the Orders page.",
              "Are returns free?",
              "Returns are free within 30 days of delivery, with a label printed from the Orders page.",
              "Returns cost 25 euros and must be sent to Amazon within 5 days."),
        _fact("kb-ship-03",
              "Express shipping costs 12 euros and delivers the next working day. "
              "It is available for orders up to 20 kilograms.",
              "How much is express shipping?",
              "Express shipping costs 12 euros and delivers the next working day for orders up to 20 kilograms.",
              "Express shipping is 80 euros via FedEx and takes 9 days."),
        _fact("kb-ship-04",
              "International orders ship to 34 countries. "
              "Customs duties for orders outside the European Union are paid by the recipient.",
              "Who pays customs duties on international orders?",
              "Customs duties for orders outside the European Union are paid by the recipient.",
              "Customs duties are always covered by UPS under the Geneva agreement of 1998."),
        _fact("kb-ship-05",
              "A tracking link is emailed when the parcel leaves the warehouse. "
              "Tracking updates every 4 hours.",
              "How do I track my parcel?",
              "A tracking link is emailed when the parcel leaves the warehouse, and tracking updates every 4 hours.",
              "Tracking is only available by phone from Tuesday to Friday at 8 pm."),
    )),
    Route("docs-search", "/api/install", (
        _fact("kb-docs-01",
              "The agent requires Python 3.11 or newer. "
              "It is installed with pip install ragpulse into a virtual environment.",
              "Which Python version does the agent need?",
              "The agent requires Python 3.11 or newer and is installed with pip into a virtual environment.",
              "The agent needs Python 2.7 and is installed with Conda on Windows only."),
        _fact("kb-docs-02",
              "The OTLP receiver listens on port 4318 by default. "
              "The port is changed with the otlp_listen setting.",
              "Which port does the OTLP receiver use?",
              "The OTLP receiver listens on port 4318 by default; change it with the otlp_listen setting.",
              "The receiver uses port 8080 and is configured through Kubernetes annotations."),
        _fact("kb-docs-03",
              "Prometheus metrics are served on port 9464 under the path metrics. "
              "Readiness is reported on readyz.",
              "Where are the Prometheus metrics served?",
              "Prometheus metrics are served on port 9464 under the path metrics, and readiness on readyz.",
              "Metrics are pushed to Datadog every 60 seconds on port 5000."),
        _fact("kb-docs-04",
              "Verdicts are cached in Redis for 7 days when a Redis URL is configured. "
              "Without Redis an in-memory cache of 100000 entries is used.",
              "How long are verdicts cached?",
              "Verdicts are cached in Redis for 7 days, or in an in-memory cache of 100000 entries without Redis.",
              "Verdicts are cached in Memcached for 90 days on Cloudflare."),
        _fact("kb-docs-05",
              "The Kafka source consumes the topic otlp_spans as a consumer group. "
              "Offsets are committed after interactions are scored.",
              "Which Kafka topic does the agent read?",
              "The Kafka source consumes the topic otlp_spans as a consumer group and commits after scoring.",
              "The agent reads the topic traces_v2 from RabbitMQ every 10 minutes."),
    )),
    Route("hr-assistant", "/api/leave", (
        _fact("kb-hr-01",
              "Full-time employees receive 28 days of paid leave per year. "
              "Unused leave of up to 5 days carries over to the next year.",
              "How many days of paid leave do employees get?",
              "Full-time employees receive 28 days of paid leave per year, and up to 5 unused days carry over.",
              "Employees get 10 days of leave and Workday cancels unused days in March."),
        _fact("kb-hr-02",
              "Parental leave is 16 weeks at full pay for every parent. "
              "It can be taken within 2 years of the birth or adoption.",
              "How long is parental leave?",
              "Parental leave is 16 weeks at full pay for every parent, taken within 2 years.",
              "Parental leave is 3 weeks unpaid and approved by the Zurich office."),
        _fact("kb-hr-03",
              "Sick leave requires a doctor's note after 3 consecutive days. "
              "The note is uploaded in the HR portal.",
              "When do I need a doctor's note for sick leave?",
              "A doctor's note is required after 3 consecutive days of sick leave and is uploaded in the HR portal.",
              "A note from Allianz is needed from the first hour and must be faxed."),
        _fact("kb-hr-04",
              "Remote work is allowed up to 3 days per week. "
              "Working from abroad is limited to 20 days per year.",
              "How many days can I work remotely?",
              "Remote work is allowed up to 3 days per week, and working from abroad up to 20 days per year.",
              "Remote work is forbidden except on Fridays in Lisbon."),
        _fact("kb-hr-05",
              "Leave requests are approved by the team lead within 2 working days. "
              "Requests are submitted in the HR portal.",
              "Who approves leave requests?",
              "Leave requests are submitted in the HR portal and approved by the team lead within 2 working days.",
              "Leave is approved by the CEO in Slack after 30 days."),
    )),
)  # fmt: skip

ALL_FACTS: tuple[Fact, ...] = tuple(f for r in ROUTES for f in r.facts)
