"""The claim's writes reach NetBox's event rules only when they commit.

NetBox queues an event (webhook, script, notification) as soon as a row is saved and
dispatches the queue when the request ends; its own views discard the queue when they
roll a write back. A refused claim rolls back a native cluster it already created, so it
must discard that cluster's `object_created` event too.
"""

from __future__ import annotations

import django_rq
from core.events import OBJECT_CREATED
from core.models import ObjectType
from django.test import TestCase
from extras.choices import EventRuleActionChoices
from extras.models import EventRule, Webhook
from rest_framework.test import APIClient
from virtualization.models import Cluster

from .base import (
    CLAIM_CREATE_PERMS,
    auth_header,
    claim_url,
    grant,
    make_endpoint,
    make_references,
    make_user,
)

RULE_NAME = "proxbox-claim-events-cluster-created"


class ClaimEventsTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, _, _ = make_references()
        cls.endpoint = make_endpoint("pve-events")
        webhook = Webhook.objects.create(
            name="proxbox-claim-events-hook", payload_url="http://127.0.0.1:9/hook"
        )
        cls.rule = EventRule.objects.create(
            name=RULE_NAME,
            event_types=[OBJECT_CREATED],
            action_type=EventRuleActionChoices.WEBHOOK,
            action_object_type=ObjectType.objects.get_for_model(Webhook),
            action_object_id=webhook.pk,
        )
        cls.rule.object_types.set([ObjectType.objects.get_for_model(Cluster)])

    def setUp(self):
        self.queue = django_rq.get_queue("default")
        self.addCleanup(self.drop_own_jobs)
        self.drop_own_jobs()

    def own_jobs(self):
        # The Redis queue is shared with other test runs: only this rule's jobs count.
        return [
            job
            for job in self.queue.jobs
            if job is not None and getattr(job.kwargs.get("event_rule"), "name", None) == RULE_NAME
        ]

    def drop_own_jobs(self):
        for job in self.own_jobs():
            job.delete()

    def claim(self, token, name):
        # Jobs reach Redis when the transaction commits; run those hooks as a commit would.
        with self.captureOnCommitCallbacks(execute=True):
            return APIClient().post(
                claim_url(self.endpoint),
                {"name": name, "mode": "cluster", "cluster_type": self.cluster_type.pk},
                format="json",
                **auth_header(token),
            )

    def test_committed_creation_queues_the_webhook(self):
        _, token = make_user("events-full", CLAIM_CREATE_PERMS)
        response = self.claim(token, "events-committed-cluster")
        self.assertEqual(response.status_code, 201, response.content)
        jobs = self.own_jobs()
        self.assertEqual(len(jobs), 1)
        self.assertEqual(jobs[0].kwargs["data"]["name"], "events-committed-cluster")

    def test_refused_creation_queues_nothing(self):
        # The cluster is saved, then the "view the created object" check refuses it.
        user, token = make_user(
            "events-blind", [p for p in CLAIM_CREATE_PERMS if p != "virtualization.view_cluster"]
        )
        grant(user, "virtualization.view_cluster", constraints={"name": "some-other-cluster"})
        response = self.claim(token, "events-rolled-back-cluster")
        self.assertEqual(response.status_code, 403, response.content)
        self.assertFalse(Cluster.objects.filter(name="events-rolled-back-cluster").exists())
        self.assertEqual(self.own_jobs(), [])
