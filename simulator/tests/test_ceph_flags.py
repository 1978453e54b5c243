"""Ceph OSD flags: the list, the single-flag reader and both writers share one state."""

from __future__ import annotations

from simtest_support import expect_data, expect_error


def _listed(root) -> dict[str, int]:
    flags = expect_data(root.get("/cluster/ceph/flags"), "/cluster/ceph/flags")
    return {f["name"]: f["value"] for f in flags}


def _single(root, flag: str) -> int:
    return expect_data(root.get(f"/cluster/ceph/flags/{flag}"), "/cluster/ceph/flags/{flag}")


def test_flag_writes_show_in_the_list_and_the_single_reader(root):
    before = _listed(root)
    assert set(before) == {
        "nobackfill", "nodeep-scrub", "nodown", "noin", "noout", "norebalance",
        "norecover", "noscrub", "notieragent", "noup", "pause",
    }  # fmt: skip
    assert before["noout"] == 0 and _single(root, "noout") == 0

    # The single-flag writer is synchronous.
    assert expect_data(root.put("/cluster/ceph/flags/noout", data={"value": 1})) is None
    assert _listed(root)["noout"] == 1
    assert _single(root, "noout") == 1

    # The bulk writer is a cephsetflags task; omitted flags keep their state.
    upid = expect_data(root.put("/cluster/ceph/flags", data={"noout": 0, "pause": 1, "noin": 0}))
    assert upid.split(":")[5] == "cephsetflags"
    assert root.wait(upid)["exitstatus"] == "OK"
    log = [
        line["t"] for line in expect_data(root.get(f"/nodes/{upid.split(':')[1]}/tasks/{upid}/log"))
    ]
    # noin was already unset: PVE does not touch it.
    assert log[:2] == ["unset noout", "set pause"] and "unset noin" not in log
    after = _listed(root)
    assert (after["noout"], after["pause"], after["noin"]) == (0, 1, 0)
    assert (_single(root, "noout"), _single(root, "pause")) == (0, 1)
    assert {k: v for k, v in after.items() if k not in ("pause",)} == {
        k: v for k, v in before.items() if k not in ("pause",)
    }

    expect_error(root.get("/cluster/ceph/flags/nosuchflag"), 400, "Parameter verification failed")
    expect_error(
        root.put("/cluster/ceph/flags/noout", data={}), 400, "Parameter verification failed"
    )
    expect_data(root.put("/cluster/ceph/flags/pause", data={"value": 0}))
    assert _single(root, "pause") == 0
