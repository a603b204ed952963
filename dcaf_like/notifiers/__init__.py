"""Outbound side of the approval-notifier port: where approvers are told that calls wait for them."""

from dcaf_like.notifiers.webhook import ApprovalWebhook, verify

__all__ = ["ApprovalWebhook", "verify"]
