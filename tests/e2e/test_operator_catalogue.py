"""An operator's own catalogue file replaces the shipped one (``--catalogue PATH``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from paymentcore import Catalogue

SHIPPED = Path(__file__).resolve().parents[2] / "paymentcore" / "data" / "catalogue.json"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paymentcore_server", *args], capture_output=True, text=True, check=False
    )


def test_operator_catalogue_adds_a_country_and_currency(tmp_path: Path) -> None:
    data = json.loads(SHIPPED.read_text("utf-8"))
    data["currencies"].append(
        {"code": "RWF", "name": "Rwandan franc", "decimals": 0, "min": "100", "max": "2000000"}
    )
    data["countries"].append(
        {
            "code": "RW",
            "name": "Rwanda",
            "currency": "RWF",
            "dialCode": "+250",
            "phoneDigits": 9,
            "phoneExample": "781234567",
            "trunkPrefix": "0",
        }
    )
    data["providers"].append(
        {
            "code": "mtn_rw",
            "name": "MTN MoMo",
            "method": "MOBILE_MONEY",
            "channelMethod": "MOMO",
            "country": "RW",
            "currency": "RWF",
            "prefixes": ["78", "79"],
        }
    )
    own = tmp_path / "catalogue.json"
    own.write_text(json.dumps(data), "utf-8")
    catalogue = Catalogue.from_file(own)
    assert catalogue.detect_provider("781234567", catalogue.countries["RW"]).code == "mtn_rw"

    db = str(tmp_path / "op.db")
    refused = run("--db", db, "merchant", "create", "Kigali Shop", "--settlement-currency", "RWF", "--json")
    assert refused.returncode != 0 and "UNKNOWN_CURRENCY" in refused.stderr
    made = run(
        "--db",
        db,
        "--catalogue",
        str(own),
        "merchant",
        "create",
        "Kigali Shop",
        "--settlement-currency",
        "RWF",
    )
    assert made.returncode == 0, made.stderr
    assert "settlementCurrency: RWF" in made.stdout
