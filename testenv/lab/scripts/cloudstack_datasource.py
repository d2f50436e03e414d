#!/usr/bin/python3
"""Run cloud-init's own CloudStack datasource against a virtual router.

usage: cloudstack_datasource.py VR_ADDRESS WORKDIR

cloud-init (Debian's package) crawls http://VR/latest/meta-data/, reads
http://VR/latest/user-data and asks the password server at VR:8080 with wget,
exactly as it does on a CloudStack VM. It writes WORKDIR/metadata.json (the
crawled meta-data, the password server's answer) and WORKDIR/user-data.
"""
import json
import os
import sys

from cloudinit import distros, helpers, settings
from cloudinit.sources import DataSourceCloudStack as cs


def main():
    vr, work = sys.argv[1], sys.argv[2]
    # cloud-init finds the virtual router through the DHCP lease's server
    # identifier; busybox udhcpc keeps no lease file, so the lab passes the
    # server identifier udhcpc got.
    cs.get_vr_address = lambda: vr
    # Record what the password server did: cloud-init logs a failure and
    # goes on, so the lab checks it here.
    password = {}
    fetch = cs.CloudStackPasswordServerClient.get_password

    def recorded(client):
        try:
            password["answer"] = fetch(client)
        except Exception as e:
            password["error"] = str(e)
            raise
        return password["answer"]

    cs.CloudStackPasswordServerClient.get_password = recorded
    paths = helpers.Paths({"cloud_dir": os.path.join(work, "cloud"), "run_dir": os.path.join(work, "run")})
    distro = distros.fetch("debian")("debian", {}, paths)
    sys_cfg = dict(settings.CFG_BUILTIN)
    sys_cfg["datasource"] = {"CloudStack": {"max_wait": 60, "timeout": 10}}
    ds = cs.DataSourceCloudStack(sys_cfg, distro, paths)
    if not ds.get_data():
        sys.exit("cloud-init's CloudStack datasource got no data from %s" % vr)
    out = {
        "instance_id": ds.get_instance_id(),
        "availability_zone": ds.availability_zone,
        "metadata": ds.metadata,
        "password_cfg": ds.get_config_obj(),
        "password_server": password,
    }
    with open(os.path.join(work, "metadata.json"), "w") as f:
        json.dump(out, f, default=str)
    with open(os.path.join(work, "user-data"), "wb") as f:
        f.write(ds.get_userdata_raw() or b"")


if __name__ == "__main__":
    main()
