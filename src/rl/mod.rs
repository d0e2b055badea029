//! Reinforcement-learning math shared by every backend: loss definitions ([`loss`]).

pub mod loss;
