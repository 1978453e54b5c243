"""Guests sharing a name in Proxmox get distinct VM names in NetBox (`domain/guest_names`)."""

from proxbox_backend.domain.guest_names import NAME_LENGTH, distinct_names
from proxbox_backend.domain.models import Guest


def guest(vmid: int, name: str, kind: str = "qemu") -> Guest:
    return Guest(kind, vmid, name, "pve1", "running", 1.0, 512)


def test_the_lowest_vmid_keeps_the_name_and_the_others_get_their_vmid():
    guests = [guest(305, "web"), guest(101, "web"), guest(220, "WEB", "lxc"), guest(102, "db")]
    assert distinct_names(guests) == {("qemu", 305): "web (305)", ("lxc", 220): "WEB (220)"}


def test_names_do_not_depend_on_the_order_the_guests_came_in():
    guests = [guest(305, "web"), guest(101, "web"), guest(220, "web")]
    assert distinct_names(guests) == distinct_names(list(reversed(guests)))


def test_a_suffixed_name_another_guest_holds_takes_the_kind_too():
    guests = [guest(101, "web"), guest(102, "web"), guest(103, "web (102)")]
    assert distinct_names(guests) == {("qemu", 102): "web (qemu/102)"}


def test_a_long_name_is_cut_to_fit_netbox():
    long = "n" * NAME_LENGTH
    renamed = distinct_names([guest(100, long), guest(100000, long.upper())])
    (name,) = renamed.values()
    assert len(name) == NAME_LENGTH and name.endswith(" (100000)")


def test_guests_with_distinct_names_keep_them():
    assert distinct_names([guest(101, "a"), guest(102, "b")]) == {}
