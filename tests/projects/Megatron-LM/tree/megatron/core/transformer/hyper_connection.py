# Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from megatron.core.tensor_parallel.random import CheckpointWithoutOutputManager
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import nvtx_decorator


def build_mhc_recompute_layer_plan(
    num_layers: int, mhc_recompute_layer_num: Optional[int], use_mhc_recompute: bool
) -> Tuple[list[Optional[CheckpointWithoutOutputManager]], list[bool]]:
    """Build per-layer mHC recompute managers and recompute-block end markers."""
    layer_managers: list[Optional[CheckpointWithoutOutputManager]] = [None] * num_layers
    is_recompute_block_end = [False] * num_layers

    if not use_mhc_recompute or num_layers == 0:
        return layer_managers, is_recompute_block_end

    mhc_manager = CheckpointWithoutOutputManager()
    for layer_index in range(num_layers):
        is_last_in_transformer_block = layer_index == num_layers - 1
        is_last_in_recompute_block = is_last_in_transformer_block
        if mhc_recompute_layer_num is not None:
            is_last_in_recompute_block = is_last_in_transformer_block or (
                (layer_index + 1) % mhc_recompute_layer_num == 0
            )

        layer_managers[layer_index] = mhc_manager
        is_recompute_block_end[layer_index] = is_last_in_recompute_block

        if is_last_in_recompute_block and not is_last_in_transformer_block:
            mhc_manager = CheckpointWithoutOutputManager()

    return layer_managers, is_recompute_block_end


def finalize_mhc_recompute_layer(
    mhc_manager: Optional[CheckpointWithoutOutputManager],
    hidden_states: Tensor,
    is_last_in_recompute_block: bool,
) -> None:
    """Finalize mHC recompute state when the current recompute block ends."""
    if mhc_manager is not None and is_last_in_recompute_block:
        mhc_manager.discard_all_outputs_and_register_unified_recompute(hidden_states)


class SinkhornKnopp(torch.autograd.Function):
    """
    Differentiable Sinkhorn-Knopp algorithm for doubly stochastic projection.

    Projects a positive matrix onto the Birkhoff polytope (doubly stochastic matrices)
    via iterative row and column normalization.

    Reference: Eq. (9) in mHC paper - M^{(t)} = T_c(T_r(M^{(t-1)}))
    """

    eps = 1e-6

    @staticmethod
    def _sinkhorn_normalize(M: Tensor, num_iterations: int) -> Tensor:
        """
        Apply Sinkhorn-Knopp normalization iterations.

        Iteratively applies row and column normalization to project M
        onto the Birkhoff polytope (doubly stochastic matrices).

        Args:
            M: [s, b, n, n] - positive matrix to normalize
            num_iterations: Number of Sinkhorn iterations

        Returns:
            M: [s, b, n, n] - doubly stochastic matrix
        """
        for _ in range(num_iterations):
            # T_r: Row normalization
            M = M / M.sum(dim=-1, keepdim=True).clamp(min=SinkhornKnopp.eps)
            # T_c: Column normalization
            M = M / M.sum(dim=-2, keepdim=True).clamp(min=SinkhornKnopp.eps)
        return M

    @staticmethod
    def forward(ctx, H_res_logits: Tensor, num_iterations: int) -> Tensor:
        """
        Project to doubly stochastic matrix via iterative row/col normalization.

        Args:
            H_res_logits: [s, b, n, n] - raw logits for residual mixing matrix
            num_iterations: Number of Sinkhorn iterations (paper uses 20)

        Returns:
            H_res: [s, b, n, n] - doubly stochastic matrix
        """
        # Gradients are computed explicitly in backward via recomputation.
        # Numerical-stability shift: subtract the per-row max before exp to prevent
        # overflow. This row-wise constant is invariant under Sinkhorn-Knopp
        # normalization: the first iteration's row normalization (T_r) divides each
        # row by its sum, which cancels any per-row scalar — i.e. exp(H_ij - c_i) and
        # exp(H_ij) produce identical row-normalized matrices, hence the same Sinkhorn
        # fixed point and the same gradient. The shift therefore changes only the
        # numeric stability of the exp, not the algorithm's output.
        M_init = torch.exp(H_res_logits - H_res_logits.max(dim=-1, keepdim=True).values)

        M = SinkhornKnopp._sinkhorn_normalize(M_init, num_iterations)

        # Save initial M for backward recomputation
        ctx.save_for_backward(M_init)
        ctx.num_iterations = num_iterations
        return M

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> Tuple[Tensor, None]:
        """
        Backward through Sinkhorn-Knopp iterations using recomputation.

        Recomputes the forward pass with gradient tracking to obtain accurate gradients.
        """
        (M_init,) = ctx.saved_tensors
        num_iterations = ctx.num_iterations

        # Recompute forward with autograd enabled
        with torch.enable_grad():
            # Leaf for recomputation
            M_input = M_init.detach().requires_grad_(True)

            M_current = SinkhornKnopp._sinkhorn_normalize(M_input, num_iterations)

            # Compute dL/dM_input (i.e., dL/dM_init) via autograd
            (grad_M_init,) = torch.autograd.grad(
                outputs=M_current,
                inputs=M_input,
                grad_outputs=grad_output,
                create_graph=False,
                retain_graph=False,
            )
        # Apply chain rule: dL/dH = dL/dM_init * dM_init/dH = dL/dM_init * M_init
        # Since M_init = exp(H_res_logits), we have d(exp(x))/dx = exp(x) = M_init
        grad_input = grad_M_init * M_init

        return grad_input, None


# TODO: keep hyper connection in fp32 computation
class HyperConnectionModule(MegatronModule):
    """
    Unified mHC (Manifold-Constrained Hyper-Connections) module.

    Implements the complete mHC propagation:
        x_{l+1} = H_res @ x_l + H_post^T @ F(H_pre @ x_l)

    This module handles:
    1. Computing learnable mappings: H_pre, H_post, H_res (with Sinkhorn-Knopp projection)
    2. Aggregation: n-stream → 1-stream (H_pre @ x)
    3. Expansion: 1-stream → n-stream (H_post^T @ output)
    4. Residual merge: H_res @ x + expanded_output
    5. Block-level expand/contract for TransformerBlock boundaries

    Args:
        config: TransformerConfig with hyper-connection fields
        layer_number: Current layer index for initialization
    """

    def __init__(self, config: TransformerConfig, layer_number: int):
        super().__init__(config)
        self.config = config
        self.layer_number = layer_number
        self.n = config.mhc_num_residual_streams
        self.hidden_size = config.hidden_size
        self.sinkhorn_iterations = config.mhc_sinkhorn_iterations

        # Projection weights for dynamic mappings
        # Input: [s, b, n*C] -> Output: n^2 + 2n values per token
        # - H_pre: n values
        # - H_post: n values
        # - H_res: n^2 values (before Sinkhorn projection)
        self.mapping_proj = nn.Linear(
            self.n * self.hidden_size, self.n * self.n + 2 * self.n, bias=False
        )

        init_alpha = config.mhc_init_gating_factor
        # Learnable scaling factors (Eq. 5 in paper)
        self.alpha_pre = nn.Parameter(torch.full((1,), init_alpha))
        self.alpha_post = nn.Parameter(torch.full((1,), init_alpha))
        self.alpha_res = nn.Parameter(torch.full((1,), init_alpha))

        # Static bias terms
        self.bias = nn.Parameter(torch.zeros(self.n * self.n + 2 * self.n))
        self.norm_eps = 1e-6

        self._init_weights()

    def _init_weights(self) -> None:
        """Initialize weights for stable training."""
        # Honor the mcore convention: skip weight init when the caller will load a
        # checkpoint over these parameters anyway (e.g. meta-device construction).
        if self.config.perform_initialization:
            nn.init.xavier_uniform_(self.mapping_proj.weight)

        # Set sequence_parallel attribute on parameters for gradient synchronization
        # across TP ranks when sequence_parallel is enabled.
        # This is required because HyperConnectionModule uses non-TP-aware layers
        # (nn.Linear, nn.RMSNorm) whose gradients need to be all-reduced.
        if self.config.sequence_parallel:
            setattr(self.mapping_proj.weight, 'sequence_parallel', True)
            setattr(self.alpha_pre, 'sequence_parallel', True)
            setattr(self.alpha_post, 'sequence_parallel', True)
            setattr(self.alpha_res, 'sequence_parallel', True)
            setattr(self.bias, 'sequence_parallel', True)

    @torch.compile
    def _projection_and_get_norm(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Project input hidden states to mapping space and apply RMS normalization.

        Args:
            x: [s, b, n*C] - n-stream hidden states
        """
        nC = x.shape[-1]
        r = x.norm(dim=-1, keepdim=True) / math.sqrt(nC)  # shape: [s, b, 1]
        r = 1.0 / (r + self.norm_eps)  # shape: [s, b, 1]
        proj = self.mapping_proj(x)  # [s, b, n^2 + 2n]
        return proj, r

    @torch.compile
    def _compute_h(self, proj: Tensor, r: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """
        Compute h from projected hidden states and scaling factors.

        Args:
            proj: [s, b, n^2 + 2n] - projected hidden states
            r: [s, b, 1] - scaling factors

        Returns:
            h_pre: [s, b, n] - aggregation weights
            h_post: [s, b, n] - expansion weights
            h_res: [s, b, n^2] - residual mixing logits
        """
        alpha_ = torch.cat(
            [
                self.alpha_pre.expand(self.n),
                self.alpha_post.expand(self.n),
                self.alpha_res.expand(self.n * self.n),
            ],
            dim=-1,
        )
        h = r * proj * alpha_ + self.bias
        # H_pre = σ(α_pre * (θ_pre @ x̃) + b_pre)
        h_pre = h[..., : self.n].sigmoid()  # [s, b, n]

        # H_post = 2σ(α_post * (θ_post @ x̃) + b_post)
        h_post = h[..., self.n : 2 * self.n].sigmoid() * 2  # [s, b, n]
        h_res = h[..., 2 * self.n :]
        return h_pre, h_post, h_res

    @nvtx_decorator(message="HyperConnection::compute_mappings")
    def compute_mappings(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """
        Compute mHC mappings from input hidden states.

        Reference: Eq. (5) and (8) in mHC paper

        Args:
            x: [s, b, n*C] - n-stream hidden states

        Returns:
            h_pre: [s, b, n] - aggregation weights (sigmoid activated)
            h_post: [s, b, n] - expansion weights (2*sigmoid activated)
            h_res: [s, b, n, n] - residual mixing matrix (doubly stochastic)
        """
        s, b, _ = x.shape
        with torch.cuda.nvtx.range("HyperConnection::projection_and_get_norm"):
            proj, r = self._projection_and_get_norm(x)
        with torch.cuda.nvtx.range("HyperConnection::compute_h"):
            h_pre, h_post, h_res = self._compute_h(proj, r)
        h_res = SinkhornKnopp.apply(
            h_res.view(s, b, self.n, self.n), self.sinkhorn_iterations
        )  # [s, b, n, n]

        return h_pre, h_post, h_res

    @torch.compile
    def _apply_h_post(self, x: Tensor, h_post: Tensor) -> Tensor:
        """
        Core implementation of H_post application to a single tensor.

        Computes: H_post^T @ x

        Args:
            x: Input tensor, can be either:
               - [s, b, C] - standard hidden states
               - [C] - bias tensor (will be broadcast)
            h_post: [s, b, n] - expansion weights

        Returns:
            output: [s, b, n*C] - expanded tensor
        """
        n = self.n
        s, b, _ = h_post.shape

        if x.dim() == 1:
            # x is bias with shape [C], need to broadcast to [s, b, 1, C]
            C = x.shape[0]
            x_expanded = x.unsqueeze(0).unsqueeze(0).unsqueeze(0).expand(s, b, 1, C)
        else:
            # x is [s, b, C]
            C = x.shape[-1]
            x_expanded = x.unsqueeze(2)  # [s, b, 1, C]

        # h_post^T @ x : [s, b, n, 1] * [s, b, 1, C] -> [s, b, n, C]
        # Using broadcast multiply instead of einsum
        result = h_post.unsqueeze(-1) * x_expanded
        return result.view(s, b, n * C)

    @nvtx_decorator(message="HyperConnection::apply_h_post")
    def apply_h_post(
        self,
        x_with_bias: Tuple[Tensor, Optional[Tensor]],
        h_post: Tensor,
        manager: Optional['CheckpointWithoutOutputManager'] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Apply H_post to x and optionally bias, with optional checkpointing.

        This is the unified entry point that handles both normal execution
        and checkpoint-based execution for memory efficiency.

        Args:
            x_with_bias: Tuple of (x, bias) where:
                - x: [s, b, C] - hidden states
                - bias: [C] or None - optional bias tensor
            h_post: [s, b, n] - expansion weights
            manager: Optional CheckpointWithoutOutputManager for checkpoint management.
                When provided, wraps _apply_h_post with CheckpointWithoutOutput.

        Returns:
            Tuple of (x_out, bias_out) where:
                - x_out: [s, b, n*C] - expanded hidden states
                - bias_out: [s, b, n*C] or None - expanded bias if input bias was not None
        """
        x, bias = x_with_bias

        if manager is not None:
            from megatron.core.tensor_parallel.random import CheckpointWithoutOutput

            # Checkpoint _apply_h_post to discard the output
            x_out = CheckpointWithoutOutput(ckpt_manager=manager).checkpoint(
                self._apply_h_post, x, h_post
            )

            # Checkpoint _apply_h_post for bias if not None
            if bias is not None:
                bias_out = CheckpointWithoutOutput(ckpt_manager=manager).checkpoint(
                    self._apply_h_post, bias, h_post
                )
            else:
                bias_out = None
        else:
            # Normal execution without checkpoint
            x_out = self._apply_h_post(x, h_post)
            bias_out = self._apply_h_post(bias, h_post) if bias is not None else None

        return x_out, bias_out

    @torch.compile
    def aggregate(self, x: Tensor, h_pre: Tensor) -> Tensor:
        """
        Aggregate n-stream to 1-stream using H_pre weights.

        Computes: sum_i(h_pre_i * x_stream_i)

        Args:
            x: [s, b, n*C] - n-stream hidden states
            h_pre: [s, b, n] - aggregation weights

        Returns:
            aggregated: [s, b, C] - single stream hidden states
        """
        s, b, _ = x.shape
        C = self.hidden_size

        # Reshape to [s, b, n, C]
        x_streams = x.view(s, b, self.n, C)

        # Weighted sum: [s, b, n, C] * [s, b, n, 1] -> sum over n -> [s, b, C]
        aggregated = (x_streams * h_pre.unsqueeze(-1)).sum(dim=2)

        return aggregated

    @torch.compile
    def apply_h_res(self, h_res: Tensor, residual: Tensor) -> Tensor:
        """
        Apply H_res to residual using H_res weights.

        Computes: H_res @ residual

        Args:
            h_res: [s, b, n, n] - residual mixing matrix
            residual: [s, b, n*C] - n-stream hidden states
        """
        s, b, _ = residual.shape
        n = self.n
        C = self.hidden_size

        # Reshape for bmm: [s, b, n, n] -> [s*b, n, n]
        h_res_batched = h_res.view(s * b, n, n)
        # [s, b, n*C] -> [s, b, n, C] -> [s*b, n, C]
        residual_batched = residual.view(s, b, n, C).view(s * b, n, C)

        # Batch matrix multiply: [s*b, n, n] @ [s*b, n, C] -> [s*b, n, C]
        mixed = torch.bmm(h_res_batched, residual_batched)

        return mixed.view(s, b, n * C)

    def forward(
        self,
        hidden_states: Tensor,
        mhc_recompute_manager: Optional['CheckpointWithoutOutputManager'] = None,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """
        Full mHC forward pass.

        Args:
            hidden_states: [s, b, n*C] - n-stream hidden states
            mhc_recompute_manager: Optional CheckpointWithoutOutputManager for checkpoint mgmt.
                When provided, uses _forward_with_checkpoint for memory-efficient execution.

        Returns:
            aggregated: [s, b, C] - aggregated input for layer computation
            h_res: [s, b, n, n] - residual mixing matrix (for fused kernel)
            h_post: [s, b, n] - expansion weights
        """
        if mhc_recompute_manager is not None:
            return self._forward_with_checkpoint(hidden_states, mhc_recompute_manager)
        else:
            return self._forward_normal(hidden_states)

    def _forward_normal(self, hidden_states: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """
        Normal forward pass without checkpointing.

        Args:
            hidden_states: [s, b, n*C] - n-stream hidden states

        Returns:
            aggregated: [s, b, C] - aggregated input for layer computation
            h_res: [s, b, n, n] - residual mixing matrix (for fused kernel)
            h_post: [s, b, n] - expansion weights
        """
        # Compute mappings
        h_pre, h_post, h_res = self.compute_mappings(hidden_states)

        # Aggregate for layer input
        with torch.cuda.nvtx.range("HyperConnection::aggregate"):
            aggregated = self.aggregate(hidden_states, h_pre)

        return aggregated, h_res, h_post

    def _forward_with_checkpoint(
        self, hidden_states: Tensor, manager: 'CheckpointWithoutOutputManager'
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """
        Forward pass with checkpointing for memory efficiency.

        compute_mappings is called directly (not checkpointed) since its outputs
        (h_pre, h_post, h_res) are needed downstream. Only aggregate is wrapped with
        CheckpointWithoutOutput and auto-registered to the manager.
        apply_h_res is deferred to fused_h_res_h_post_bda for kernel fusion.

        Args:
            hidden_states: [s, b, n*C] - n-stream hidden states
            manager: CheckpointWithoutOutputManager for unified recomputation

        Returns:
            aggregated: [s, b, C] - aggregated input for layer computation
            h_res: [s, b, n, n] - residual mixing matrix (for fused kernel)
            h_post: [s, b, n] - expansion weights
        """
        from megatron.core.tensor_parallel.random import CheckpointWithoutOutput

        h_pre, h_post, h_res = self.compute_mappings(hidden_states)

        # Checkpoint aggregate - auto-registers to manager
        aggregated = CheckpointWithoutOutput(ckpt_manager=manager).checkpoint(
            self.aggregate, hidden_states, h_pre
        )

        return aggregated, h_res, h_post

    # ==================== Block-level utilities ====================

    @staticmethod
    def input_expand(x: Tensor, n: int) -> Tensor:
        """
        Expand 1-stream to n-stream at TransformerBlock entry.

        Simple replication strategy: each stream initialized as a copy of input.

        Args:
            x: [s, b, C] - single stream hidden states
            n: Number of residual streams

        Returns:
            expanded: [s, b, n*C] - n-stream hidden states
        """
        s, b, C = x.shape
        # Replicate input to n streams
        expanded = x.unsqueeze(2).expand(s, b, n, C).contiguous()
        return expanded.view(s, b, n * C)

    @staticmethod
    def output_contract(x: Tensor, n: int) -> Tensor:
        """
        Contract n-stream to 1-stream at TransformerBlock exit.

        Simple averaging strategy: average all streams.

        Args:
            x: [s, b, n*C] - n-stream hidden states
            n: Number of residual streams

        Returns:
            contracted: [s, b, C] - single stream hidden states
        """
        s, b, nC = x.shape
        C = nC // n
        # Average all streams
        x_streams = x.view(s, b, n, C)
        contracted = x_streams.mean(dim=2)
        return contracted

    # ==================== Fused kernel placeholder ====================

    @nvtx_decorator(message="HyperConnection::fused_h_res_h_post_bda")
    def fused_h_res_h_post_bda(
        self,
        h_res: Tensor,
        original_residual: Tensor,
        h_post: Tensor,
        layer_output_with_bias: Tuple[Tensor, Optional[Tensor]],
        dropout_prob: float,
        training: bool,
        fused: bool,
        manager: Optional['CheckpointWithoutOutputManager'] = None,
    ) -> Tensor:
        """
        Fused kernel combining apply_h_res, apply_h_post and bias-dropout-add.

        This is a placeholder for future kernel fusion optimization.
        Currently implements the operations sequentially using native PyTorch.

        The computation flow is:
            1. mixed = H_res @ original_residual (apply_h_res)
            2. expanded = H_post^T @ layer_output (apply_h_post)
            3. output = dropout(expanded + bias) + mixed (bias-dropout-add)

        Args:
            h_res: [s, b, n, n] - residual mixing matrix
            original_residual: [s, b, n*C] - n-stream hidden states (before H_res applied)
            h_post: [s, b, n] - expansion weights
            layer_output_with_bias: Tuple of (x, bias) where:
                - x: [s, b, C] - layer output (attention or MLP output)
                - bias: [C] or None - optional bias tensor
            dropout_prob: Dropout probability
            training: Whether in training mode
            fused: Whether to use fused BDA implementation
            manager: Optional CheckpointWithoutOutputManager for checkpoint management.
                When provided, each operation is wrapped with CheckpointWithoutOutput.

        Returns:
            output: [s, b, n*C] - final output after all operations
        """
        if manager is not None:
            return self._fused_h_res_h_post_bda_with_checkpoint(
                h_res,
                original_residual,
                h_post,
                layer_output_with_bias,
                dropout_prob,
                training,
                fused,
                manager,
            )
        else:
            return self._fused_h_res_h_post_bda_native(
                h_res,
                original_residual,
                h_post,
                layer_output_with_bias,
                dropout_prob,
                training,
                fused,
            )

    def _fused_h_res_h_post_bda_native(
        self,
        h_res: Tensor,
        original_residual: Tensor,
        h_post: Tensor,
        layer_output_with_bias: Tuple[Tensor, Optional[Tensor]],
        dropout_prob: float,
        training: bool,
        fused: bool,
    ) -> Tensor:
        """
        Native implementation of fused h_res, h_post and bda operations.

        Args:
            h_res: [s, b, n, n] - residual mixing matrix
            original_residual: [s, b, n*C] - n-stream hidden states
            h_post: [s, b, n] - expansion weights
            layer_output_with_bias: Tuple of (x, bias)
            dropout_prob: Dropout probability
            training: Whether in training mode
            fused: Whether to use fused BDA implementation

        Returns:
            output: [s, b, n*C] - final output
        """
        from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add

        # Step 1: Apply H_res to original residual
        with torch.cuda.nvtx.range("HyperConnection::apply_h_res"):
            mixed = self.apply_h_res(h_res, original_residual)

        # Step 2: Apply H_post to layer output
        x, bias = layer_output_with_bias
        with torch.cuda.nvtx.range("HyperConnection::apply_h_post"):
            x_expanded = self._apply_h_post(x, h_post)
            bias_expanded = self._apply_h_post(bias, h_post) if bias is not None else None

        # Step 3: Bias-dropout-add
        bda_func = get_bias_dropout_add(training, fused)
        with torch.cuda.nvtx.range("HyperConnection::bda"):
            output = bda_func((x_expanded, bias_expanded), mixed, dropout_prob)

        return output

    @nvtx_decorator(message="HyperConnection::fused_h_res_h_post_bda_with_checkpoint")
    def _fused_h_res_h_post_bda_with_checkpoint(
        self,
        h_res: Tensor,
        original_residual: Tensor,
        h_post: Tensor,
        layer_output_with_bias: Tuple[Tensor, Optional[Tensor]],
        dropout_prob: float,
        training: bool,
        fused: bool,
        manager: 'CheckpointWithoutOutputManager',
    ) -> Tensor:
        """
        Checkpointed implementation of fused h_res, h_post and bda operations.

        Uses a single checkpoint wrapper around all operations for memory efficiency.

        Args:
            h_res: [s, b, n, n] - residual mixing matrix
            original_residual: [s, b, n*C] - n-stream hidden states
            h_post: [s, b, n] - expansion weights
            layer_output_with_bias: Tuple of (x, bias)
            dropout_prob: Dropout probability
            training: Whether in training mode
            fused: Whether to use fused BDA implementation
            manager: CheckpointWithoutOutputManager for checkpoint management

        Returns:
            output: [s, b, n*C] - final output
        """
        from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
        from megatron.core.tensor_parallel.random import CheckpointWithoutOutput

        # Get BDA function (captured via closure)
        bda_func = get_bias_dropout_add(training, fused)

        # Unpack layer_output_with_bias to avoid tuple tensors in checkpoint args
        x, bias = layer_output_with_bias
        has_bias = bias is not None

        # Native wrapper that combines all operations without internal checkpointing.
        # Non-tensor args (dropout_prob, has_bias) are captured via closure.
        def _native_wrapper(h_res, original_residual, h_post, x, *optional_bias):
            # Step 1: Apply H_res to original residual
            with torch.cuda.nvtx.range("HyperConnection::apply_h_res"):
                mixed = self.apply_h_res(h_res, original_residual)

            # Step 2: Apply H_post to x and bias
            with torch.cuda.nvtx.range("HyperConnection::apply_h_post"):
                x_expanded = self._apply_h_post(x, h_post)
                if has_bias:
                    bias_expanded = self._apply_h_post(optional_bias[0], h_post)
                else:
                    bias_expanded = None

            # Step 3: Bias-dropout-add
            with torch.cuda.nvtx.range("HyperConnection::bda"):
                output = bda_func((x_expanded, bias_expanded), mixed, dropout_prob)

            return output

        # Use a single checkpoint wrapper for all operations
        ckpt = CheckpointWithoutOutput(ckpt_manager=manager)
        if has_bias:
            output = ckpt.checkpoint(_native_wrapper, h_res, original_residual, h_post, x, bias)
        else:
            output = ckpt.checkpoint(_native_wrapper, h_res, original_residual, h_post, x)

        return output
