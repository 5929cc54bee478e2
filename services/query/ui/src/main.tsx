import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import '@opensearch-project/oui/dist/eui_theme_light.min.css';
import './style.css';
import { App } from './App';
import { registerIcons } from './icons';

registerIcons();

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
