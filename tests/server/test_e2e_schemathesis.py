"""schemathesis against the server's own OpenAPI document (/openapi.json): for every operation it
declares, requests generated from the document (50 valid ones, 25 invalid ones per operation,
derandomized so CI and a developer see the same cases) must get no 5xx, a documented status and
content type, a body that conforms to the declared response schema, and, for invalid data, a 4xx.
So everything the document declares is true of the server, and nothing it accepts breaks it.

Generated requests are kept short (max_tokens at most 4, n at most 2); the values stay inside
the declared ranges, so the cases remain what was generated in every other respect. Each
operation and mode also has a time budget (35 s): generated prompts (tool schemas, long message
lists) can take seconds each to prefill on two cores, and the whole run stays under ~2 minutes;
the number of examples each one ran is printed and must reach a floor.
"""
import time

import pytest

try:
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode
except ImportError:  # CI installs both; a developer without them gets the install line
    schemathesis = None

POSITIVE_EXAMPLES = 50
NEGATIVE_EXAMPLES = 25
MAX_TOKENS = 4
BUDGET_S = 35          # per operation and mode
MIN_EXAMPLES = 10      # an operation that cannot run this many within its budget fails


class BudgetSpent(Exception):
    """Raised inside the property once the time budget is spent: hypothesis stops there."""


def keep_short(case):
    """Caps generation in a generated JSON body (in place): max_tokens <= 4 (set when absent or
    null, as the default is the whole context), n <= 2. Other values are left as generated."""
    body = case.body
    if not isinstance(body, dict):
        return
    present = False
    for key in ("max_tokens", "max_completion_tokens"):
        if key in body:
            present = True
            v = body[key]
            # null means "no limit" (the whole context): as long as a large number.
            if v is None or (isinstance(v, int) and not isinstance(v, bool) and v > MAX_TOKENS):
                body[key] = MAX_TOKENS
    if not present and ("messages" in body or "prompt" in body):
        body["max_tokens"] = MAX_TOKENS
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 2:
        body["n"] = 2


def has_inputs(op) -> bool:
    """Whether the operation takes anything that can be made invalid (body or parameters)."""
    definition = op.definition.raw if hasattr(op.definition, "raw") else op.definition
    return bool(definition.get("requestBody") or definition.get("parameters"))


def run_operation(op, mode, examples, base_url, budget_s=BUDGET_S) -> int:
    """Runs up to `examples` generated cases within budget_s; returns how many were sent."""
    sent = 0
    deadline = time.monotonic() + budget_s

    @given(case=op.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate],
              print_blob=False)
    def check(case):
        nonlocal sent
        if time.monotonic() > deadline:
            raise BudgetSpent()
        # Only valid cases are shortened: a negative case must reach the server as generated (it
        # is refused before any decoding), and capping its numbers could make it valid.
        if mode == GenerationMode.POSITIVE:
            keep_short(case)
        sent += 1
        case.call_and_validate(base_url=base_url, timeout=120)

    try:
        check()
    except BudgetSpent:
        pass
    return sent


def describe(e) -> str:
    """A failure as schemathesis words it (its message has the check, the reply and a curl line)."""
    text = str(e)
    for sub in getattr(e, "exceptions", ()):
        text += f"\n  {type(sub).__name__}: {sub}"
    return text


def test_server_conforms_to_its_openapi_document(sluice_server):
    if schemathesis is None:
        pytest.fail("schemathesis is not installed: pip install schemathesis hypothesis (CI installs them)")
    schema = schemathesis.openapi.from_url(sluice_server.base_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {op.label for op in operations}
    # The document declares at least the OpenAI endpoints and the probes the page and CI use.
    for label in ("GET /v1/models", "POST /v1/chat/completions", "POST /v1/completions", "GET /health", "GET /ready"):
        assert label in labels, f"/openapi.json does not declare {label}: {sorted(labels)}"
    failures = []
    for op in operations:
        modes = [(GenerationMode.POSITIVE, POSITIVE_EXAMPLES)]
        if has_inputs(op):
            modes.append((GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES))
        for mode, examples in modes:
            try:
                sent = run_operation(op, mode, examples, sluice_server.base_url)
                print(f"schemathesis: {op.label} ({mode.value}): {sent} requests")
                # Operations without inputs have a single distinct request to send.
                if sent < min(MIN_EXAMPLES, examples) and has_inputs(op):
                    failures.append(f"--- {op.label} ({mode.value}): only {sent} requests within {BUDGET_S} s")
            # Every operation runs and all failures are reported together (schemathesis raises
            # a BaseExceptionGroup of its failures).
            except (Exception, BaseExceptionGroup) as e:
                failures.append(f"--- {op.label} ({mode.value}):\n{describe(e)}")
    assert sluice_server.proc.poll() is None, "the server died during the schemathesis run"
    assert not failures, "\n".join(failures)
