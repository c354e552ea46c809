#!/bin/sh
# Runs once inside the image build, after the files are copied in.
set -eu
ldconfig
# The other user of the shared host, and the daemons' accounts.
useradd --create-home --uid 1001 --shell /bin/bash researcher
useradd --system --no-create-home --shell /usr/sbin/nologin nvidia-persistenced
# The operator: logs in over SSH with Ansible's key and becomes root with sudo.
useradd --create-home --uid 1002 --shell /bin/bash deployer
# No password, but not locked: sshd without PAM refuses a locked account.
usermod --password '*' deployer
printf 'deployer ALL=(ALL:ALL) NOPASSWD: ALL\n' > /etc/sudoers.d/deployer
chmod 0440 /etc/sudoers.d/deployer
# The tools are Python files; these are their commands.
printf '#!/bin/sh\nexec /usr/bin/python3 /usr/local/lib/gpusim/gpusim.py "$@"\n' \
    > /usr/local/bin/gpusim
printf '#!/bin/sh\nexec /usr/bin/python3 /usr/local/lib/gpusim/nvidia_smi.py "$@"\n' \
    > /usr/bin/nvidia-smi
chmod 0755 /usr/local/bin/gpusim /usr/bin/nvidia-smi
systemctl enable gpusim-boot.service
# Units a test host never needs; they only slow down boot.
systemctl mask systemd-logind.service getty.target console-getty.service \
    systemd-networkd.service systemd-resolved.service systemd-timesyncd.service \
    apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service \
    systemd-remount-fs.service dev-hugepages.mount sys-kernel-debug.mount \
    sys-kernel-tracing.mount 2>/dev/null || true
# No sshd daemon: a host is reached by running `sshd -i` through podman exec
# (see tests/simhost/README.md), so nothing listens on any port.
systemctl disable ssh.service 2>/dev/null || true
systemctl mask ssh.service ssh.socket 2>/dev/null || true
python3 -m compileall -q /usr/lib/python3/dist-packages/pynvml.py
echo "gpusim" > /etc/gpusim-image
# The root of the containers a host runs (gpusim-container): mount points and
# links only; /usr and /etc come from the host, read-only.
mkdir -p /srv/gpusim-rootfs
for dir in usr etc proc sys dev run tmp var/tmp root; do
    mkdir -p "/srv/gpusim-rootfs/$dir"
done
for link in bin sbin lib lib64; do
    ln -s "usr/$link" "/srv/gpusim-rootfs/$link"
done
