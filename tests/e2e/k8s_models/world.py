"""The models wired together over one real driver deployment, in simulated time."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.e2e.harness import Cluster
from tests.e2e.k8s_models.adc import AttachDetachController
from tests.e2e.k8s_models.attacher import ExternalAttacher
from tests.e2e.k8s_models.clock import SimClock
from tests.e2e.k8s_models.kubelet import VolumeManager
from tests.e2e.k8s_models.nodes import NodeLifecycle
from tests.e2e.k8s_models.objects import Api
from tests.e2e.k8s_models.objects import Node as NodeObject
from tests.e2e.k8s_models.provisioner import ExternalProvisioner

# The controllers' loops run every 100 ms upstream; one tick of simulated time is coarser, which
# only delays each step to the next tick.
TICK = 0.5


@dataclass
class World:
    cluster: Cluster
    clock: SimClock = field(default_factory=SimClock)
    api: Api = field(default_factory=Api)

    def __post_init__(self) -> None:
        for name, node in self.cluster.nodes.items():
            self.api.nodes[name] = NodeObject(name, node.node_id)
        self.attacher = ExternalAttacher(self.api, self.clock, self.cluster.controller)
        self.adc = AttachDetachController(self.api, self.clock, self.attacher.enqueue)
        self.provisioner = ExternalProvisioner(
            self.api, self.clock, self.cluster.controller, self.cluster.nodes
        )
        self.lifecycle = NodeLifecycle(self.api, self.clock)
        self.kubelets = {
            name: VolumeManager(self.api, self.clock, node)
            for name, node in self.cluster.nodes.items()
        }

    def step(self) -> None:
        self.clock.now += TICK
        self.lifecycle.sync()
        self.provisioner.sync()
        for kubelet in self.kubelets.values():
            kubelet.sync()
        self.adc.sync()
        self.attacher.sync()

    def advance(self, seconds: float) -> None:
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.step()

    def run_until(
        self, done: Callable[[], bool], limit: float, what: str, pace: float = 0.0
    ) -> float:
        """Advance until done() is true; the simulated seconds it took. pace (real seconds
        slept per tick) lets something that runs in real time, a node plugin's fence pass,
        happen while the models retry."""
        start = self.clock.now
        while not done():
            if self.clock.now - start > limit:
                raise AssertionError(f"{what}: not done after {limit:.0f} simulated seconds")
            self.step()
            if pace:
                time.sleep(pace)
        return self.clock.now - start

    def partition(self, node: str) -> None:
        """The node is cut off from the control plane (its kubelet posts nothing and hears
        nothing), while its plugin still runs and still reaches the pool."""
        self.kubelets[node].frozen = True

    # ----- a node that freezes: its kubelet and its plugin alike -----
    def freeze(self, node: str) -> None:
        self.kubelets[node].frozen = True
        self.cluster.nodes[node].plugin.kill(signal.SIGSTOP)

    def thaw(self, node: str, kubelet: bool = True) -> None:
        """kubelet=False thaws only the plugin: the plugin's fence runs in real time, the
        kubelet's retries in simulated time, so a scenario may let the fence finish first."""
        self.cluster.nodes[node].plugin.kill(signal.SIGCONT)
        if kubelet:
            self.kubelets[node].frozen = False
