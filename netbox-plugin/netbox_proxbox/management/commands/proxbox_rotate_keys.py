"""Re-encrypt every stored endpoint token secret with the newest configured key."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ...encryption import (
    SecretDecryptionError,
    encrypted_with_newest_key,
    fernet,
    reencrypt_with_newest_key,
)
from ...models import ProxmoxEndpoint


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored Proxmox token secret with the newest key of "
        'PLUGINS_CONFIG["netbox_proxbox"]["encryption_key"] (a list, newest first). '
        "All or nothing: if any secret opens with none of the configured keys, nothing is "
        "written and the command exits non-zero naming those endpoints. Running it again "
        "changes nothing. Afterwards the older keys can be removed from the list."
    )

    def handle(self, *args, **options):
        try:
            fernet()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        rotated = current = 0
        undecryptable = []
        with transaction.atomic():
            # Endpoint rows are the first rank of the ownership lock order, so locking
            # them (in primary-key order) cannot deadlock with a claim in flight.
            endpoints = (
                ProxmoxEndpoint.objects.select_for_update(of=("self",))
                .exclude(token_secret_ciphertext="")
                .order_by("pk")
                .values_list("pk", "name", "token_secret_ciphertext")
            )
            for pk, name, ciphertext in endpoints:
                if encrypted_with_newest_key(ciphertext):
                    current += 1
                    continue
                try:
                    fresh = reencrypt_with_newest_key(ciphertext)
                except SecretDecryptionError:
                    undecryptable.append(f"{name} (#{pk})")
                    continue
                # A plain UPDATE: the ciphertext never enters change records or signals.
                ProxmoxEndpoint.objects.filter(pk=pk).update(token_secret_ciphertext=fresh)
                rotated += 1
            if undecryptable:
                # Raising inside the block rolls back the secrets already re-encrypted.
                raise CommandError(
                    f"{len(undecryptable)} token secret(s) open with none of the configured keys, "
                    f"nothing was changed: {', '.join(undecryptable)}"
                )
        self.stdout.write(
            f"re-encrypted {rotated} token secret(s) with the newest key; {current} already used it"
        )
