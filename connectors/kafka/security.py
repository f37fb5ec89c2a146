"""How every Kafka client windjoin creates connects: TLS and SASL settings from the spec's `kafka:` section.

The settings travel as where-to-find-them (a password file or the name of an environment variable, a CA file),
never as the password: `client_config()` reads the password when a client is built, on the process that builds it
(driver or executor), so it is in no Spark option, ConfigMap or argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from windjoin.connectors.secret_files import read_secret

OPTION_PREFIX = "windjoin.kafka."  # Spark source options carrying these settings (lower-cased by Spark)


class KafkaSecurityError(ValueError):
    """Kafka credentials that cannot be read; the message names the key."""


@dataclass(frozen=True)
class KafkaSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    ca_file: str | None = None

    @staticmethod
    def from_spec(kafka: Any) -> KafkaSecurity:
        """From a validated `operators.spec.KafkaSpec` (None: plaintext)."""
        if kafka is None:
            return KafkaSecurity()
        return KafkaSecurity(**{f.name: getattr(kafka, f.name) for f in fields(KafkaSecurity)})

    def password(self) -> str | None:
        return read_secret(self.password_file, self.password_env, "kafka", KafkaSecurityError)

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for a consumer, producer or admin client (the password read now)."""
        if self.security_protocol == "PLAINTEXT":
            return {}
        config = {"security.protocol": self.security_protocol}
        if self.ca_file:
            config["ssl.ca.location"] = self.ca_file
        if self.security_protocol.startswith("SASL_"):
            config["sasl.mechanism"] = str(self.sasl_mechanism)
            config["sasl.username"] = str(self.username)
            config["sasl.password"] = str(self.password())
        return config

    def to_options(self) -> dict[str, str]:
        """The settings as Spark source options (no secret among them)."""
        return {OPTION_PREFIX + f.name: str(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name)}

    @staticmethod
    def from_options(options: Mapping[str, str]) -> KafkaSecurity:
        """Back from (lower-cased) Spark options."""
        given = {f.name: options.get(OPTION_PREFIX + f.name) for f in fields(KafkaSecurity)}
        return KafkaSecurity(**{k: v for k, v in given.items() if v})


PLAINTEXT = KafkaSecurity()
